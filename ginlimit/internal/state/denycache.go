package state

import (
	"context"
	"sync/atomic"
	"time"
)

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
	// ExactBelow is the remaining quota below which Redis reports the exact
	// time until quota grows, and below which the cache keeps a key's
	// bound and counts its calls in flight.
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
// keeps nothing longer than its staleness bound, and the [Hub] that
// tracks it makes it drop a key at once on a reset (Forget), and everything
// when resets may have been missed (Clear).
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
	hub     *Hub         // keeps it coherent with resets (Hub.Track), or nil
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
	cost    int
	counted *keyState // the state that counts the call in flight, or nil
	probe   bool      // the call checks a lapsed rejection (see Enter)
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

// Enter decides whether a call of cost units on key may go to Redis now.
// A call let through (Send) must hand its ticket to Leave or Release.
//
// A certain rejection whose state has outlived the staleness bound (but
// not the moment its quota grows) is checked with Redis by one call, the
// probe; while the probe is out, the other requests on the key are still
// answered from the state, for at most one more staleness bound. So a flood
// on an over-limit key costs Redis one call per bound, however many
// goroutines flood it.
func (c *DenyCache) Enter(key string, cost int) Turn {
	t := c.Stamp()
	t.cost = cost
	return c.enter(key, t)
}

func (c *DenyCache) enter(key string, t Ticket) Turn {
	now, cost := t.sent, t.cost
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
	case st.remaining >= t.cost || now >= st.grows:
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
		st.inflight -= t.cost
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
