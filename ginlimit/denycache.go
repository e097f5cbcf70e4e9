package ginlimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ginlimit/ginlimit/lua"
)

const (
	// denyShards is the number of independently locked parts of a deny cache.
	denyShards = 16
	// lowRemaining is the remaining quota under which a key's in-flight
	// calls are counted, so that no more calls are sent than could still be
	// admitted.
	lowRemaining = lua.ExactBelow
	// exactBelow is the sliding log's exact-below, lua.ExactBelow: below
	// this remaining quota (and on every rejection) the script reports the
	// exact time until the oldest entry leaves the window, which the
	// cache's bounds need; above it, it reports the window, an upper bound,
	// and saves a read.
	exactBelow = lua.ExactBelow
)

// DenyCache sets how many keys near or over their limit each rule of the
// route remembers in process; 0 turns the cache off. The default is
// [DefaultDenyCacheSize].
//
// A rejection is certain until the first moment the key's remaining quota
// can grow, on every instance, so the cache answers repeated requests on a
// rejected key without Redis until that moment: a flood on an over-limit
// key costs Redis one call per key per [MaxStaleness] (1 s by default). The
// answers are the ones Redis would give: a reset made with [Policy.Reset]
// is seen by every instance at once, and a change made behind ginlimit's
// back (a key deleted by hand, FLUSHALL, an eviction) within MaxStaleness,
// since nothing is kept longer. The cache is bounded by size
// (per rule) and safe for concurrent use. On a route with several [Rule]s,
// a request that one rule certainly rejects is rejected in process, since
// the rules are all or nothing.
func DenyCache(size int) Option {
	return routeOption(func(r *routeConfig) error {
		if size < 0 {
			return fmt.Errorf("DenyCache(%d): the size must be 0 (off) or positive", size)
		}
		r.deny = size
		return nil
	})
}

// denyCache remembers, per Redis key, what is certain about its quota.
//
// The sliding log admits nothing more on a key until its oldest entry leaves
// the window: entries leave only by time (or by the key's TTL, which is
// later), and requests from any instance only add entries. So after a
// decision that reports remaining r and reset t, the key's true remaining
// quota stays at most r for t, on every instance. The cache keeps that bound
// with a deadline of (local monotonic time the call was sent) + t. The call
// was sent before Redis read its clock, so the local deadline never outlasts
// the true one.
//
//   - Bound 0: every request until the deadline is rejected in process,
//     exactly as Redis would reject it. A flood on an over-limit key costs
//     Redis nothing.
//   - Bound r below lowRemaining: a request costing more than r is rejected
//     in process (it is certain not to fit), and calls on the key are sent
//     to Redis only while the costs in flight fit in r. A further request
//     waits (within its timeout) for one of them to finish and then looks
//     again. Nothing is rejected on a guess; requests that would have been
//     rejected just do not reach Redis.
//
// This holds for every algorithm, because each script reports as reset the
// first moment its remaining quota can grow: the oldest entry leaving (log),
// the window ending (fixed), the next whole token (bucket), the oldest
// counted sub-window leaving (counter).
//
// In-flight rules ([InFlight]) have no deny cache: their slots free when
// a request ends, not only with time, so no refusal of theirs is certain
// for any time, and no script of theirs reports a reset.
//
// What the cache cannot prove is that nobody changed the key behind
// ginlimit's back (DEL, FLUSHALL, an eviction, a failover that lost
// writes): so it keeps nothing longer than the staleness bound
// (MaxStaleness), and its hub (coherence.go) drops a key at once when
// Policy.Reset announces it, and everything when the announcement
// channel is lost.
//
// The cache is bounded: each shard holds at most perShard keys; a full shard
// drops expired keys first and otherwise an arbitrary idle one. It is safe
// for concurrent use.
type denyCache struct {
	base      time.Time // origin of the monotonic clock
	seed      maphash.Seed
	perShard  int
	staleness int64 // ns: nothing is kept longer (MaxStaleness)
	strikes   bool  // the rule has a Ban: count the refusals answered here
	hub       *hub  // keeps the cache coherent with resets, or nil (coherence.go)
	shards    [denyShards]denyShard
	clock     func() int64 // tests only: replaces the monotonic clock
}

type denyShard struct {
	mu sync.RWMutex
	m  map[string]*keyState
	// carried holds, per key, the refusals answered in process that its
	// rule's Ban has not been told of yet (strikeN, drain). It is apart
	// from m, which forgets keys to stay bounded and is cleared when the
	// reset subscription is lost: a strike is no bound on quota, and
	// dropping it would let a client shed it. An entry lives until its
	// strikes are drained: by the key's next call, or by the report
	// scheduled when it was made (Policy.carry), so about MaxStaleness.
	carried map[string]*atomic.Int64
}

// keyState is what the cache knows of one key. Its fields are guarded by
// the shard's lock.
type keyState struct {
	until     int64 // local monotonic ns: the state is used before this (at most grows, and the staleness bound)
	grows     int64 // local monotonic ns: the bound holds before this
	resetAt   int64 // Redis clock, Unix µs, when more quota comes
	remaining int   // upper bound on the key's remaining quota
	inflight  int   // units of the counted calls now in flight
	probing   bool  // a call is checking a lapsed rejection with Redis (see enter)
	wake      chan struct{}
}

// newDenyCache returns a cache of about size keys that keeps nothing longer
// than staleness, or nil if size is 0.
func newDenyCache(size int, staleness time.Duration) *denyCache {
	if size <= 0 {
		return nil
	}
	c := &denyCache{base: time.Now(), seed: maphash.MakeSeed(), perShard: max(1, (size+denyShards-1)/denyShards), staleness: int64(staleness)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*keyState)
		c.shards[i].carried = make(map[string]*atomic.Int64)
	}
	return c
}

// now returns the cache's monotonic clock in nanoseconds.
func (c *denyCache) now() int64 {
	if c.clock != nil {
		return c.clock()
	}
	return int64(time.Since(c.base))
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// verdict is what enter decides for a request.
type verdict int

const (
	callRedis verdict = iota // send it; the cache knows nothing certain
	rejected                 // a certain rejection: answer from the cache
	waitTurn                 // enough calls are in flight: wait, then look again
)

// enter decides whether a request of cost units on key may go to Redis at
// now. With callRedis and a non-nil state, the call is counted in flight and
// the caller must pass the state and cost to leave.
//
// A certain rejection whose state has outlived the staleness bound (but
// not the moment its quota grows) is checked with Redis by one call, the
// probe (its snapshot has probing set, and the caller passes probe to
// leave); while the probe is out, the other requests on the key are still
// answered from the state, for at most one more staleness bound. So a flood
// on an over-limit key costs Redis one call per bound, however many
// goroutines flood it.
func (c *denyCache) enter(key string, now int64, cost int) (verdict, *keyState, keyState) {
	s := c.shard(key)
	s.mu.RLock()
	st := s.m[key]
	switch {
	case st == nil:
		s.mu.RUnlock()
		return callRedis, nil, keyState{}
	case st.remaining < cost && (now < st.until || st.probing && now < st.until+c.staleness && now < st.grows):
		snap := *st
		s.mu.RUnlock()
		return rejected, nil, snap
	}
	s.mu.RUnlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if st = s.m[key]; st == nil {
		return callRedis, nil, keyState{}
	}
	if now >= st.until {
		switch {
		case st.remaining >= cost || now >= st.grows:
			return callRedis, nil, keyState{}
		case !st.probing:
			st.probing = true
			return callRedis, st, keyState{probing: true}
		case now < st.until+c.staleness:
			return rejected, nil, *st
		}
		return callRedis, nil, keyState{}
	}
	switch {
	case st.remaining < cost:
		return rejected, nil, *st
	case st.inflight+cost <= st.remaining:
		st.inflight += cost
		return callRedis, st, keyState{}
	}
	if st.wake == nil {
		st.wake = make(chan struct{})
	}
	return waitTurn, nil, keyState{wake: st.wake}
}

// wait blocks until a counted call on the key finishes or ctx ends.
func wait(ctx context.Context, wake chan struct{}) error {
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// generation returns what leave needs to know whether a call's outcome may
// still be kept when it comes back (see hub.learnable).
func (c *denyCache) generation() uint64 { return c.hub.generation() }

// leave records the outcome of a call sent at sent, at generation gen: the
// state counted by enter (nil if none) is released, waiters are woken, and
// what the decision proves is kept for at most the cache's staleness, and
// only if no reset (and no loss of the reset subscription) came in
// between. ok is false when the call failed.
func (c *denyCache) leave(key string, counted *keyState, cost int, sent int64, gen uint64, probe bool, d *Decision, ok bool) {
	learn := ok && d != nil && d.Remaining < lowRemaining && c.hub.learnable(gen)
	if counted == nil && !learn {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if probe {
		counted.probing = false
	} else if counted != nil {
		counted.inflight -= cost
		if counted.wake != nil {
			close(counted.wake)
			counted.wake = nil
		}
	}
	if !learn {
		return
	}
	grows := sent + int64(d.Reset)
	until := min(grows, sent+c.staleness)
	resetAt := d.Time.UnixMicro() + d.Reset.Microseconds()
	st := s.m[key]
	if st == nil {
		c.makeRoom(s, sent)
		st = &keyState{}
		s.m[key] = st
	}
	if sent >= st.until { // the old state has lapsed: start afresh
		st.until, st.grows, st.resetAt, st.remaining = until, grows, resetAt, d.Remaining
		return
	}
	// Both bounds hold until the earlier deadline; keep the tighter. The
	// state is as fresh as its older part.
	if grows < st.grows {
		st.grows, st.resetAt = grows, resetAt
	}
	st.until = min(st.until, until)
	st.remaining = min(st.remaining, d.Remaining)
}

// makeRoom evicts from a full shard. It looks at a few keys only (map order
// is random), so an insert costs O(1) however large the shard: expired idle
// keys among them go, and if none did, the first idle one. Keys with calls
// in flight stay, so no waiter is orphaned.
func (c *denyCache) makeRoom(s *denyShard, now int64) {
	if len(s.m) < c.perShard {
		return
	}
	const sample = 8
	seen, victim := 0, ""
	for k, st := range s.m {
		if st.inflight == 0 {
			if now >= st.until {
				delete(s.m, k)
				victim = ""
				if len(s.m) < c.perShard-sample {
					return
				}
			} else if victim == "" {
				victim = k
			}
		}
		if seen++; seen == sample {
			break
		}
	}
	if victim != "" && len(s.m) >= c.perShard {
		delete(s.m, victim)
	}
}

// len returns the number of keys held, expired ones included.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// forget drops what the cache knows of key (a reset): the next request on it
// goes to Redis. Calls it counted in flight still leave as usual.
func (c *denyCache) forget(key string) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key) // calls it counted in flight leave through their own pointer
	delete(s.carried, key)
}

// clear drops what the cache knows of every key's quota; the strikes it
// carries stay (see denyShard.carried).
func (c *denyCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}

// strikeN records n refusals of key answered in process, for the rule's
// [Ban]: the next call on the key reports them (drain). It reports whether
// the key carried none before, so that the caller schedules their report
// (Policy.carry). A cache that is off, or keeps no strikes, records
// nothing.
func (c *denyCache) strikeN(key string, n int64) bool {
	if c == nil || n <= 0 || !c.strikes {
		return false
	}
	s := c.shard(key)
	s.mu.RLock()
	if k := s.carried[key]; k != nil {
		first := k.Add(n) == n
		s.mu.RUnlock()
		return first
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.carried[key]
	if k == nil {
		k = new(atomic.Int64)
		s.carried[key] = k
	}
	return k.Add(n) == n
}

// drain returns the refusals of key answered in process since the last
// drain, and forgets them; 0 for a cache that is off.
func (c *denyCache) drain(key string) int64 {
	if c == nil || !c.strikes {
		return 0
	}
	s := c.shard(key)
	s.mu.RLock()
	k := s.carried[key]
	s.mu.RUnlock()
	if k == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k = s.carried[key]; k == nil {
		return 0
	}
	delete(s.carried, key)
	return k.Swap(0)
}
