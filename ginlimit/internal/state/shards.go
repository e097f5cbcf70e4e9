// Package state holds what an instance of ginlimit keeps in process that
// follows Redis: the deny cache (certain refusals answered without a call),
// the FailLocal fallback's token buckets, and the in-flight rules' local
// slot counts. Each is a map per Redis key on one sharded map, [Shards].
//
// Nothing here knows rules, requests or HTTP: callers hand in keys, costs
// and what Redis answered ([Answer]), and get back what the state proves.
package state

import (
	"hash/maphash"
	"sync"
)

// numShards is how many independently locked parts a [Shards] has: enough
// that goroutines on different keys seldom wait for each other, few enough
// that a count or a clear over every part stays cheap.
const numShards = 16

// Shards is a map from string keys to values of type V, split into parts
// that are locked independently. A part's keys are chosen by a hash with a
// seed of its own, so that no client can aim its keys at one part. Each
// part may be bounded: it then holds about keys/numShards keys, and its
// user makes room ([Shard.Evict]) before it inserts into a full part.
//
// The zero value is not usable; make one with [NewShards]. Shards must not
// be copied. It is safe for concurrent use through the locks of its parts.
type Shards[V any] struct {
	seed  maphash.Seed
	parts [numShards]Shard[V]
}

// Shard is one part of a [Shards]: a map guarded by its own lock. Get and
// Len need the read lock, or the lock; the other methods need the lock.
type Shard[V any] struct {
	sync.RWMutex
	m     map[string]V
	bound int // most keys before Full; 0: unbounded
}

// NewShards returns an empty map that holds about keys keys in all (at
// least one per part), or any number when keys is 0.
func NewShards[V any](keys int) *Shards[V] {
	s := &Shards[V]{seed: maphash.MakeSeed()}
	bound := 0
	if keys > 0 {
		bound = max(1, (keys+numShards-1)/numShards)
	}
	for i := range s.parts {
		s.parts[i].m = make(map[string]V)
		s.parts[i].bound = bound
	}
	return s
}

// Shard returns the part that holds key.
func (s *Shards[V]) Shard(key string) *Shard[V] {
	return &s.parts[maphash.String(s.seed, key)%numShards]
}

// Len returns the number of keys held in every part.
func (s *Shards[V]) Len() int {
	n := 0
	for i := range s.parts {
		p := &s.parts[i]
		p.RLock()
		n += len(p.m)
		p.RUnlock()
	}
	return n
}

// Clear drops every key of every part.
func (s *Shards[V]) Clear() {
	for i := range s.parts {
		p := &s.parts[i]
		p.Lock()
		clear(p.m)
		p.Unlock()
	}
}

// Delete drops key, taking its part's lock.
func (s *Shards[V]) Delete(key string) {
	p := s.Shard(key)
	p.Lock()
	defer p.Unlock()
	delete(p.m, key)
}

// Get returns key's value and whether it is held.
func (p *Shard[V]) Get(key string) (V, bool) {
	v, ok := p.m[key]
	return v, ok
}

// Put sets key's value.
func (p *Shard[V]) Put(key string, v V) { p.m[key] = v }

// Delete drops key.
func (p *Shard[V]) Delete(key string) { delete(p.m, key) }

// Len returns the number of keys the part holds.
func (p *Shard[V]) Len() int { return len(p.m) }

// Full reports whether the part is bounded and holds its bound, so that
// one more key needs room made first.
func (p *Shard[V]) Full() bool { return p.bound > 0 && len(p.m) >= p.bound }

// Pick is what an eviction does with a key it looks at (see [Shard.Evict]).
type Pick int

const (
	// Busy keys stay: something still depends on them.
	Busy Pick = iota
	// Stale keys go: dropping them changes nothing a caller could see.
	Stale
	// Idle keys may go, one of them, when dropping the stale ones made no
	// room.
	Idle
)

// evictSample is how many keys an eviction looks at.
const evictSample = 8

// Evict makes room in a full part for one more key. It looks at a few
// keys only (map order is random, so they are a sample, and an insert
// costs O(1) however large the part): judge says what each is. The stale
// ones go; if the part is still full, the first idle one goes. Busy keys
// stay, so a part whose sampled keys are all busy holds one more than its
// bound for a while rather than drop what a caller still uses.
func (p *Shard[V]) Evict(judge func(key string, v V) Pick) {
	seen, victim, found := 0, "", false
	for k, v := range p.m {
		switch judge(k, v) {
		case Stale:
			delete(p.m, k)
		case Idle:
			if !found {
				victim, found = k, true
			}
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if found && p.Full() {
		delete(p.m, victim)
	}
}
