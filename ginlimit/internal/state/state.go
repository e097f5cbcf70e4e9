// Package state holds what an instance of ginlimit keeps in process that
// follows Redis: the deny cache (certain refusals answered without a call),
// the FailLocal fallback's token buckets, and the in-flight rules' local
// slot counts. Each is a map per Redis key on one sharded map, [Shards].
//
// Nothing here knows rules, requests or HTTP: callers hand in keys, costs
// and what Redis answered ([Answer]), and get back what the state proves.

package state

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
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

// Answer is what Redis answered for one key: the remaining quota, how long
// until it can grow, and Redis's clock when it answered. A refusal the deny
// cache is certain of is an Answer too, the one Redis would give.
type Answer struct {
	Remaining int
	Reset     time.Duration
	At        time.Time
}

// DenyConfig is what a [DenyCache] is made with.
type DenyConfig struct {
	// Size is about how many keys the cache holds; 0 turns it off.
	Size int
	// Staleness is the longest the cache keeps anything it learned.
	Staleness time.Duration
	// ExactBelow is the remaining quota below which the cache keeps a key's
	// bound and counts its calls in flight (every script reports the exact
	// time until quota grows there).
	ExactBelow int
	// Strikes says the cache counts the refusals it answers, for a ban
	// (StrikeN, Drain).
	Strikes bool
}

// DenyCache remembers, per Redis key, what is certain about its quota.
//
// A script reports as reset the first moment its remaining quota can grow:
// the oldest entry leaving (sliding log), the window ending (fixed), the
// next whole token (bucket), the oldest counted sub-window leaving
// (counter). Until then, requests from any instance only use quota up. So
// after an answer with remaining r and reset t, the key's true remaining
// quota stays at most r for t, on every instance. The cache keeps that
// bound with a deadline of (local monotonic time the call was sent) + t.
// The call was sent before Redis read its clock, so the local deadline
// never outlasts the true one.
//
//   - Bound 0: every request until the deadline is rejected in process,
//     exactly as Redis would reject it.
//   - Bound r below ExactBelow: a request costing more than r is rejected
//     in process (it is certain not to fit), and calls on the key are sent
//     to Redis only while the costs in flight fit in r. A further request
//     waits for one of them to finish and then looks again. Nothing is
//     rejected on a guess; requests that would have been rejected just do
//     not reach Redis.
//
// What the cache cannot prove is that nobody changed the key behind its
// back (DEL, FLUSHALL, an eviction, a failover that lost writes): so it
// keeps nothing longer than its staleness bound, and the reset hub that
// tracks it (package fleet) makes it drop a key at once on a reset (Forget),
// and everything when resets may have been missed (Clear).
//
// The cache is bounded: each part holds about Size/16 keys; a full part
// drops expired keys first and otherwise an idle one. Its methods are safe
// for concurrent use; a nil *DenyCache is an absent cache for StrikeN and
// Drain.
type DenyCache struct {
	base       time.Time // origin of the monotonic clock
	staleness  int64     // ns: nothing is kept longer
	exactBelow int
	strikes    bool
	keys       *Shards[*keyState]
	// carried holds, per key, the refusals answered in process that its
	// rule's ban has not been told of yet (StrikeN, Drain). It is apart
	// from keys, which forgets keys to stay bounded and is cleared when
	// resets may have been missed: a strike is no bound on quota, and
	// dropping it would let a client shed it. An entry lives until its
	// strikes are drained.
	carried *Shards[*atomic.Int64]
	hub     *Coherence   // whether it may learn (the reset hub's, see Follow), or nil
	clock   func() int64 // replaces the monotonic clock, or nil
}

// keyState is what the cache knows of one key. Its fields are guarded by
// its part's lock.
type keyState struct {
	until     int64 // local monotonic ns: the state is used before this (at most grows, and the staleness bound)
	grows     int64 // local monotonic ns: the bound holds before this
	resetAt   int64 // Redis clock, Unix µs, when more quota comes
	remaining int   // upper bound on the key's remaining quota
	inflight  int   // units of the counted calls now in flight
	probing   bool  // a call is checking a lapsed rejection with Redis (see Enter)
	wake      chan struct{}
}

// NewDenyCache returns a cache made with cfg, or nil if cfg.Size is 0.
func NewDenyCache(cfg DenyConfig) *DenyCache {
	if cfg.Size <= 0 {
		return nil
	}
	return &DenyCache{
		base:       time.Now(),
		staleness:  int64(cfg.Staleness),
		exactBelow: cfg.ExactBelow,
		strikes:    cfg.Strikes,
		keys:       NewShards[*keyState](cfg.Size),
		carried:    NewShards[*atomic.Int64](0),
	}
}

// SetClock replaces the cache's monotonic clock (ns) with clock, so that a
// test decides when the cache's bounds lapse. Call it before the cache is
// used.
func (c *DenyCache) SetClock(clock func() int64) { c.clock = clock }

// SetStaleness replaces the cache's staleness bound. Call it before the
// cache is used.
func (c *DenyCache) SetStaleness(d time.Duration) { c.staleness = int64(d) }

// Staleness returns the longest the cache keeps anything it learned.
func (c *DenyCache) Staleness() time.Duration { return time.Duration(c.staleness) }

// now returns the cache's monotonic clock in nanoseconds.
func (c *DenyCache) now() int64 {
	if c.clock != nil {
		return c.clock()
	}
	return int64(time.Since(c.base))
}

// Verdict is what [DenyCache.Enter] decides for a call.
type Verdict int

const (
	// Send the call to Redis: the cache knows nothing certain.
	Send Verdict = iota
	// Reject the call: a certain rejection, answered from the cache.
	Reject
	// Wait: enough calls on the key are in flight; wait for one to end
	// (Turn.Await), then look again.
	Wait
)

// Ticket is a call's place in the cache from Enter to Leave or Release:
// when and at which generation it was let through, and what it counted.
type Ticket struct {
	sent    int64 // the cache's clock when the call was let through
	gen     uint64
	counted *keyState // the state that counts the call in flight, or nil
	// cost fits in 32 bits (a cost is at most lua.MaxCost), which keeps a
	// ticket, held in every share of a decision's memory, small.
	cost  int32
	probe bool // the call checks a lapsed rejection (see Enter)
}

// Turn is what Enter decides for a call: its verdict, the ticket to hand
// to Leave or Release (for Send), the certain answer (for Reject, see
// Answer), or what to wait on (for Wait, see Await).
type Turn struct {
	Verdict Verdict
	Ticket  Ticket
	snap    keyState // for Reject and Wait: the state that decided
}

// Answer is the answer of a rejected turn: the one Redis would give at the
// moment of the turn.
func (t *Turn) Answer() Answer {
	reset := time.Duration(t.snap.grows - t.Ticket.sent)
	return Answer{Remaining: t.snap.remaining, Reset: reset, At: time.UnixMicro(t.snap.resetAt).Add(-reset)}
}

// Await blocks, for a turn to Wait, until a counted call on the key
// finishes or ctx ends.
func (t *Turn) Await(ctx context.Context) error {
	select {
	case <-t.snap.wake:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Stamp returns a ticket for a call the cache does not count but may learn
// from: its time and generation now.
func (c *DenyCache) Stamp() Ticket {
	return Ticket{sent: c.now(), gen: c.hub.generation(), cost: 1}
}

// Enter decides whether a call of cost units (1 to lua.MaxCost) on key may
// go to Redis now. A call let through (Send) must hand its ticket to Leave
// or Release.
//
// A certain rejection whose state has outlived the staleness bound (but
// not the moment its quota grows) is checked with Redis by one call, the
// probe; while the probe is out, the other requests on the key are still
// answered from the state, for at most one more staleness bound. So a flood
// on an over-limit key costs Redis one call per bound, however many
// goroutines flood it.
func (c *DenyCache) Enter(key string, cost int) Turn {
	t := c.Stamp()
	t.cost = int32(cost)
	return c.enter(key, t)
}

func (c *DenyCache) enter(key string, t Ticket) Turn {
	now, cost := t.sent, int(t.cost)
	s := c.keys.Shard(key)
	s.RLock()
	st, _ := s.Get(key)
	switch {
	case st == nil:
		s.RUnlock()
		return Turn{Verdict: Send, Ticket: t}
	case st.remaining < cost && (now < st.until || st.probing && now < st.until+c.staleness && now < st.grows):
		snap := *st
		s.RUnlock()
		return Turn{Verdict: Reject, Ticket: t, snap: snap}
	}
	s.RUnlock()

	s.Lock()
	defer s.Unlock()
	if st, _ = s.Get(key); st == nil {
		return Turn{Verdict: Send, Ticket: t}
	}
	if now >= st.until {
		return c.lapsed(st, t)
	}
	switch {
	case st.remaining < cost:
		return Turn{Verdict: Reject, Ticket: t, snap: *st}
	case st.inflight+cost <= st.remaining:
		st.inflight += cost
		t.counted = st
		return Turn{Verdict: Send, Ticket: t}
	}
	if st.wake == nil {
		st.wake = make(chan struct{})
	}
	return Turn{Verdict: Wait, Ticket: t, snap: keyState{wake: st.wake}}
}

// lapsed is Enter's verdict on a state past its deadline; the part's lock
// is held.
func (c *DenyCache) lapsed(st *keyState, t Ticket) Turn {
	now := t.sent
	switch {
	case st.remaining >= int(t.cost) || now >= st.grows:
		return Turn{Verdict: Send, Ticket: t}
	case !st.probing:
		st.probing = true
		t.counted, t.probe = st, true
		return Turn{Verdict: Send, Ticket: t}
	case now < st.until+c.staleness:
		return Turn{Verdict: Reject, Ticket: t, snap: *st}
	}
	return Turn{Verdict: Send, Ticket: t}
}

// Release lets go of a call that proved nothing: it failed, or was never
// sent. What it counted is released and waiters are woken.
func (c *DenyCache) Release(key string, t Ticket) {
	if t.counted == nil {
		return
	}
	s := c.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	release(t)
}

// release gives back what t counted; its part's lock is held.
func release(t Ticket) {
	switch st := t.counted; {
	case st == nil:
	case t.probe:
		st.probing = false
	default:
		st.inflight -= int(t.cost)
		if st.wake != nil {
			close(st.wake)
			st.wake = nil
		}
	}
}

// Leave records a's proof for key, Redis's answer to the call of ticket
// t: what t counted is released, waiters are woken, and what a proves is
// kept for at most the staleness bound, and only if it is low enough to
// matter and no reset (nor any loss of the resets) came in between.
func (c *DenyCache) Leave(key string, t Ticket, a Answer) {
	learn := a.Remaining < c.exactBelow && c.hub.learnable(t.gen)
	if t.counted == nil && !learn {
		return
	}
	s := c.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	release(t)
	if learn {
		c.learn(s, key, t.sent, a)
	}
}

// learn keeps what a, the answer to a call sent at sent, proves of key;
// the part's lock is held.
func (c *DenyCache) learn(s *Shard[*keyState], key string, sent int64, a Answer) {
	grows := sent + int64(a.Reset)
	until := min(grows, sent+c.staleness)
	resetAt := a.At.UnixMicro() + a.Reset.Microseconds()
	st, _ := s.Get(key)
	if st == nil {
		if s.Full() {
			s.Evict(func(_ string, st *keyState) Pick {
				switch {
				case st.inflight > 0:
					return Busy // no waiter is orphaned
				case sent >= st.until:
					return Stale
				}
				return Idle
			})
		}
		st = &keyState{}
		s.Put(key, st)
	}
	if sent >= st.until { // the old state has lapsed: start afresh
		st.until, st.grows, st.resetAt, st.remaining = until, grows, resetAt, a.Remaining
		return
	}
	// Both bounds hold until the earlier deadline; keep the tighter. The
	// state is as fresh as its older part.
	if grows < st.grows {
		st.grows, st.resetAt = grows, resetAt
	}
	st.until = min(st.until, until)
	st.remaining = min(st.remaining, a.Remaining)
}

// Len returns the number of keys held, expired ones included.
func (c *DenyCache) Len() int { return c.keys.Len() }

// Forget drops what the cache knows of key (a reset), and the strikes it
// carries: the next request on it goes to Redis. Calls it counted in
// flight still leave as usual, through their own tickets.
func (c *DenyCache) Forget(key string) {
	c.keys.Delete(key)
	c.carried.Delete(key)
}

// Clear drops what the cache knows of every key's quota; the strikes it
// carries stay.
func (c *DenyCache) Clear() { c.keys.Clear() }

// StrikeN records n refusals of key answered in process, for the rule's
// ban: the next call on the key reports them (Drain). It reports whether
// the key carried none before, so that the caller schedules their report.
// A cache that is off, or keeps no strikes, records nothing.
func (c *DenyCache) StrikeN(key string, n int64) bool {
	if c == nil || n <= 0 || !c.strikes {
		return false
	}
	s := c.carried.Shard(key)
	s.RLock()
	if k, _ := s.Get(key); k != nil {
		first := k.Add(n) == n
		s.RUnlock()
		return first
	}
	s.RUnlock()
	s.Lock()
	defer s.Unlock()
	k, _ := s.Get(key)
	if k == nil {
		k = new(atomic.Int64)
		s.Put(key, k)
	}
	return k.Add(n) == n
}

// Drain returns the refusals of key answered in process since the last
// drain, and forgets them; 0 for a cache that is off.
func (c *DenyCache) Drain(key string) int64 {
	if c == nil || !c.strikes {
		return 0
	}
	s := c.carried.Shard(key)
	s.RLock()
	k, _ := s.Get(key)
	s.RUnlock()
	if k == nil {
		return 0
	}
	s.Lock()
	defer s.Unlock()
	if k, _ = s.Get(key); k == nil {
		return 0
	}
	s.Delete(key)
	return k.Swap(0)
}

// Coherence is what a deny cache asks before it keeps what Redis said:
// whether the subscription that tells of resets is up, and a generation
// that every reset seen and every loss of the subscription moves. The reset
// hub (package fleet) keeps it; a nil *Coherence (no subscription) lets a
// cache learn everything. It is safe for concurrent use.
type Coherence struct {
	live atomic.Bool
	gen  atomic.Uint64
}

// Move moves the generation: no call already out may keep what it saw.
func (h *Coherence) Move() { h.gen.Add(1) }

// SetLive records whether the subscription is up, and returns whether it
// was.
func (h *Coherence) SetLive(up bool) bool { return h.live.Swap(up) }

// Live reports whether the subscription is up; a nil Coherence is not.
func (h *Coherence) Live() bool { return h != nil && h.live.Load() }

// learnable reports whether a deny cache may keep what a call that started
// at generation gen proved: the subscription is up and nothing was reset or
// lost while the call was out.
func (h *Coherence) learnable(gen uint64) bool {
	return h == nil || h.live.Load() && h.gen.Load() == gen
}

// generation returns the generation, for learnable; 0 without one.
func (h *Coherence) generation() uint64 {
	if h == nil {
		return 0
	}
	return h.gen.Load()
}

// Follow makes c keep what it learns only while h says so (see
// learnable); the reset hub calls it as it starts tracking c.
func (c *DenyCache) Follow(h *Coherence) { c.hub = h }

// Instances is how many instances of an application share a Redis, which
// the fallbacks divide their limits by: a count a heartbeat keeps (see
// package fleet), or a fixed one. A count a heartbeat keeps has
// not heard from Redis until its first beat answers (Store): until then
// it knows neither the fleet nor any key, and a fallback must not decide
// on it (Heard). A nil *Instances counts one, and has heard. It is safe
// for concurrent use.
type Instances struct {
	n     atomic.Int64
	heard *atomic.Bool // set by the heartbeat's first answer; nil: no heartbeat to wait for
}

// NewInstances returns a fixed count of n instances, which has heard.
func NewInstances(n int) *Instances {
	c := &Instances{}
	c.n.Store(int64(n))
	return c
}

// NewHeartbeatCount returns a count of 1 that a heartbeat keeps, which
// has not heard from Redis until the heartbeat first stores a count.
func NewHeartbeatCount() *Instances {
	c := NewInstances(1)
	c.heard = new(atomic.Bool)
	return c
}

// Fixed returns a fixed count of n that has heard from Redis when c has:
// a count given in configuration, on an instance whose heartbeat is c.
func (c *Instances) Fixed(n int) *Instances {
	f := NewInstances(n)
	f.heard = c.heard
	return f
}

// Load returns the count, at least 1.
func (c *Instances) Load() int {
	if c == nil {
		return 1
	}
	return int(max(1, c.n.Load()))
}

// Store sets the count, as Redis answered it: the count has heard.
func (c *Instances) Store(n int) {
	c.n.Store(int64(n))
	if c.heard != nil {
		c.heard.Store(true)
	}
}

// Raise raises the count to n, when it is lower: an instance that joined
// said how many it counted (a notice), and a count only falls with a beat,
// so that a late notice never makes it count too few.
func (c *Instances) Raise(n int) {
	for {
		old := c.n.Load()
		if old >= int64(n) || c.n.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}

// Heard reports whether Redis has answered the count's heartbeat once,
// or there is none to wait for.
func (c *Instances) Heard() bool { return c == nil || c.heard == nil || c.heard.Load() }

// Buckets is the in-process fallback of one rule, which decides while
// Redis cannot: a token bucket per key, refilling share per window, where
// share is the rule's limit divided by the instances that share it,
// counted at each use (so a bucket follows a change of the count at once).
// The share is fractional, never rounded up: Limit(10) on 4 instances
// refills 2.5 per window, not 3. A bucket holds at most its share, starts
// from it, and admits a request when it holds its cost. So a share below
// one request admits nothing: Limit(1) on 4 instances gives no instance a
// whole request. Letting a bucket hold one unit all the same would let the
// instances, which cannot talk to each other, each admit one in the same
// window (4 of Limit(1)): the fleet's bound holds only if no instance takes
// more than its share.
//
// It continues from what Redis last said, never from a full budget: each
// answer Redis gives for a key (Learn) sets the key's bucket to this
// instance's part of the remaining it reported (remaining/n, at most
// share: every instance continues from the same remaining, so together
// they may spend it once, not n times), less what the fallback admitted on
// the key within the window before, and the refill starts only when that
// answer said quota grows (its Reset). So a key Redis has answered for
// keeps its last known remaining, a key it refused stays refused until its
// reset, and a ban Redis reported holds (Banned). Only a key it has never
// seen here (or has forgotten, see below) starts with share units.
//
// The bucket of a key whose last answer left it at share or more is not
// kept: a new bucket holds share. It holds about the keys it was made
// with; a full part evicts, of a few keys looked at, those whose bucket
// holds its share again (forgetting them gives nothing away), or else one
// at random. A
// bucket mirrors a Redis answer for at most the answer's reset plus one
// window (the time to refill). golang.org/x/time/rate cannot start a
// bucket's refill at a later time, which continuing from a refusal needs,
// so the bucket is written here. It is safe for concurrent use.
type Buckets struct {
	limit     int
	instances *Instances // nil for a ban's memory
	window    int64      // ns; 0 for a ban's memory, which never refills
	base      time.Time
	keys      *Shards[*bucket]
}

// rate is the shape of a Buckets' buckets at one moment: the share each
// starts from and refills per window (ns), and the most each holds (the
// share; one unit for a ban's memory). The refill is share × elapsed / window,
// multiplied before it is divided, so that a whole number of windows
// refills whole units, exactly.
type rate struct{ share, most, window float64 }

// rate returns l's shape for the count of instances now.
func (l *Buckets) rate() rate {
	if l.window == 0 {
		return rate{share: 1, most: 1, window: 0} // a ban: one unit, held until its end
	}
	share := float64(l.limit) / float64(l.instances.Load())
	return rate{share: share, most: share, window: float64(l.window)}
}

// bucket is one key's bucket. Times are ns since the Buckets' base.
type bucket struct {
	tokens   float64 // as of at
	at       int64
	from     int64   // the refill starts no earlier
	redisAt  int64   // Redis's time (µs) of the answer it continues from
	owed     float64 // units the fallback admitted, charged to Redis's answers
	owedTill int64   // until then (a window after the last of them)
}

// NewBuckets returns the fallback of a rule of limit per window shared by
// instances, holding about keys keys.
func NewBuckets(limit int, instances *Instances, window time.Duration, keys int) *Buckets {
	return &Buckets{limit: limit, instances: instances, window: int64(window), base: time.Now(), keys: NewShards[*bucket](keys)}
}

// NewBans returns the fallback's memory of the bans of a rule's ban,
// holding about keys keys: a key is banned until its bucket's refill
// starts, as Redis last reported (Learn, Banned).
func NewBans(keys int) *Buckets {
	return NewBuckets(1, nil, 0, keys)
}

func (l *Buckets) ns(t time.Time) int64 { return int64(t.Sub(l.base)) }

// refill brings b's tokens up to now, at most what r holds.
func (b *bucket) refill(now int64, r rate) {
	start := max(b.at, b.from)
	if now > start {
		b.tokens += float64(now-start) * r.share / r.window // +Inf for a ban
	}
	b.tokens = min(r.most, b.tokens)
	b.at = max(b.at, now)
}

// refillTime is how long a bucket of r takes to refill n units.
func (r rate) refillTime(n float64) time.Duration {
	return time.Duration(math.Ceil(n * r.window / r.share))
}

// UnitRefill returns how long a bucket takes to refill one unit: the reset
// of a decision the fallback admitted.
func (l *Buckets) UnitRefill() time.Duration { return l.rate().refillTime(1) }

// bucket returns key's bucket, made with its share when there is none, and
// making room for it when its part is full. The part's lock is held.
func (l *Buckets) bucket(s *Shard[*bucket], key string, now int64, r rate) *bucket {
	if b, _ := s.Get(key); b != nil {
		return b
	}
	if s.Full() {
		s.Evict(func(_ string, b *bucket) Pick {
			if b.refill(now, r); b.tokens >= r.share && now >= b.owedTill {
				return Stale
			}
			return Idle
		})
	}
	b := &bucket{tokens: r.share, at: now}
	s.Put(key, b)
	return b
}

// Take takes cost units from key's bucket at t, if it holds them, and
// returns the units left; otherwise how long until it could.
func (l *Buckets) Take(key string, t time.Time, cost int) (left int, retry time.Duration, ok bool) {
	now, r := l.ns(t), l.rate()
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	b := l.bucket(s, key, now, r)
	b.refill(now, r)
	c := float64(cost)
	if c > r.most {
		return int(b.tokens), r.refillTime(c), false
	}
	if b.tokens < c {
		wait := max(b.from-now, 0)
		return int(b.tokens), time.Duration(wait) + r.refillTime(c-b.tokens), false
	}
	b.tokens -= c
	b.owed += c
	b.owedTill = now + l.window
	return int(b.tokens), 0, true
}

// Give returns cost units that Take took (all or none: a later rule
// refused the request).
func (l *Buckets) Give(key string, cost int) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	if b, _ := s.Get(key); b != nil {
		b.tokens = min(l.rate().most, b.tokens+float64(cost))
		b.owed = max(0, b.owed-float64(cost))
	}
}

// Banned returns how long key's ban has left at t, as Redis last
// reported it; 0 when there is none.
func (l *Buckets) Banned(key string, t time.Time) time.Duration {
	now := l.ns(t)
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	if b, _ := s.Get(key); b != nil && b.from > now && b.tokens < 1 {
		return time.Duration(b.from - now)
	}
	return 0
}

// Learn sets key's bucket from a, Redis's answer to a call sent at sent:
// to this instance's part of the remaining a reports (remaining/n), less
// what the fallback admitted in the window before, with the refill from
// a's reset on. An answer older (on Redis's clock) than the one the bucket
// has is ignored.
func (l *Buckets) Learn(key string, a Answer, sent time.Time) {
	r := l.rate()
	remaining := float64(a.Remaining) / float64(l.instances.Load())
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	b, _ := s.Get(key)
	now := l.ns(sent)
	if b == nil && remaining >= r.share {
		return // a new bucket holds share: nothing to keep
	}
	at := a.At.UnixMicro()
	if b == nil {
		b = l.bucket(s, key, now, r)
	} else if at < b.redisAt {
		return
	}
	if now >= b.owedTill {
		b.owed = 0
	}
	b.redisAt, b.at = at, now
	b.tokens = max(0, min(r.share, remaining-b.owed))
	b.from = now + int64(a.Reset)
}

// Forget drops key's bucket (a reset): its next decision starts from a
// full bucket.
func (l *Buckets) Forget(key string) { l.keys.Delete(key) }

// Slots is an in-flight rule's in-process count of slots per key, its
// fallback while Redis cannot decide: at most n/instances (at least 1,
// counted at each Take) per key in this process. Unlike a rate's share,
// a slot is held, not spent, so a fraction of one cannot be spread over
// time: an instance runs one request or none, and none would make every
// rule of fewer slots than instances refuse all its requests during an
// outage. So a fleet runs at most max(n, instances) per key. It counts
// the slots this process holds in Redis (Hold) with those the
// fallback gave (Take). A key is kept only while a slot of it is held, so
// it needs no bound of its own: it holds at most as many keys as requests
// are in flight. It is safe for concurrent use.
type Slots struct {
	n         int
	instances *Instances
	keys      *Shards[int]
}

// NewSlots returns a count of at most n/instances slots per key.
func NewSlots(n int, instances *Instances) *Slots {
	return &Slots{n: n, instances: instances, keys: NewShards[int](0)}
}

// Hold counts a slot of key that Redis granted: it takes one whether or
// not the cap has room, so that Take sees it.
func (l *Slots) Hold(key string) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	held, _ := s.Get(key)
	s.Put(key, held+1)
}

// Take takes a slot of key if one is free, and returns how many are left.
func (l *Slots) Take(key string) (int, bool) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	held, _ := s.Get(key)
	n := max(1, l.n/l.instances.Load())
	if held >= n {
		return 0, false
	}
	s.Put(key, held+1)
	return n - held - 1, true
}

// Give gives back a slot of key.
func (l *Slots) Give(key string) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	if held, _ := s.Get(key); held > 1 {
		s.Put(key, held-1)
	} else {
		s.Delete(key)
	}
}
