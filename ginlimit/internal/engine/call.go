package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Run sends one script call to the node that serves keys[0] (every key of
// a call is in one slot) and returns the reply, as integers, and the
// node's breaker (nil when there is none).
//
// Time spent in this process is not Redis failing, so the stages are
// bounded apart: an open breaker fails the call at once (ErrCircuitOpen);
// the wait for one of the node's slots (as many as the pool's connections)
// is bounded by ctx, queue and maxWaiting, and running out is
// ErrSaturated; then Redis has timeout to answer. Only a network error, or
// no answer within timeout while Redis answered no other call of the node
// either, counts against the breaker. A call that timed out while Redis
// answered others waited behind this process's own calls: it is
// ErrSaturated, which neither counts as a failure nor resets the count.
func (e *Engine) Run(ctx context.Context, queue, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *Breaker, error) {
	return e.runOn(ctx, decisionLane, queue, timeout, s, keys, args)
}

// Aside is Run for every call beside the decisions: a lease's renewal or
// release, and the fleet's upkeep (the heartbeat, the overrides' version
// and their load), whose reply is integers; AsideTexts is the same for a
// reply of strings. Both wait for the server's aside slots, never behind
// the calls queued for its other slots, and go to Redis directly, never
// behind the auto-pipeliner's backlog, on a connection pool and breaker of
// their own (see lease.go); so a flood of decisions on this process cannot
// make a lease it holds lapse, or an instance drop out of the count, while
// Redis answers. A wait for a slot is bounded by timeout, and so is the
// call once it has one. The breaker is asked and told as for a decision.
func (e *Engine) Aside(ctx context.Context, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *Breaker, error) {
	return e.runOn(ctx, leaseLane, timeout, timeout, s, keys, args)
}

// AsideTexts is [Engine.Aside] for a script that replies an array of
// strings.
func (e *Engine) AsideTexts(ctx context.Context, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]string, error) {
	n, probe, err := e.admit(ctx, leaseLane, timeout, timeout, keys[0])
	if err != nil {
		return nil, err
	}
	defer e.nodes.leaseMu.RUnlock()
	defer n.release(leaseLane)
	answered := n.answered.Load()
	start := time.Now()
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	reply, err := call(cctx, n, start, func() ([]string, error) { return e.transport.texts(cctx, n, s, keys, args) })
	_, err = e.settle(ctx, n, probe, answered, err)
	return reply, err
}

// lane is which of a node's capacities a call waits for.
type lane bool

const (
	decisionLane lane = false // decisions, peeks, resets: the node's slots
	leaseLane    lane = true  // the calls aside (Engine.Aside): its lease slots
)

// runOn is Run on lane l.
func (e *Engine) runOn(ctx context.Context, l lane, queue, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *Breaker, error) {
	n, probe, err := e.admit(ctx, l, queue, timeout, keys[0])
	if err != nil {
		return nil, n.brk, err
	}
	if l == leaseLane {
		defer e.nodes.leaseMu.RUnlock()
	}
	defer n.release(l)
	answered := n.answered.Load()
	w := &wire{start: time.Now()}
	cctx, cancel := e.transport.callContext(ctx, timeout, w)
	if cancel != nil {
		defer cancel()
	}
	reply, err := e.transport.send(cctx, l, n, w, s, keys, args)
	_, err = e.settle(ctx, n, probe, answered, err)
	return reply, n.brk, err
}

// admit finds the node of key, asks its breaker (probe: this call is its
// probe) and takes one of its slots on lane l within queue. On the lease
// lane it returns holding e.nodes.leaseMu for reading, which the caller
// releases after the call, unless it fails. On failure the node may be
// nil, or not hold a slot.
func (e *Engine) admit(ctx context.Context, l lane, queue, timeout time.Duration, key string) (*node, bool, error) {
	n, err := e.nodes.forKey(ctx, timeout, key)
	if err != nil {
		if !NoVerdict(err) && !errors.Is(err, ErrCircuitOpen) {
			n.health.note(e.nodes.watch, true, err) // no master or shard for the key
		}
		return n, false, err
	}
	if l == leaseLane {
		e.nodes.leaseMu.RLock()
		n = e.nodes.leaseNode(n)
	}
	fail := func(err error) (*node, bool, error) {
		if l == leaseLane {
			e.nodes.leaseMu.RUnlock()
		}
		return n, false, err
	}
	ok, probe := n.brk.allow()
	if !ok {
		return fail(ErrCircuitOpen)
	}
	if err := n.acquire(ctx, l, queue); err != nil {
		if probe {
			n.brk.abandon() // not a verdict on Redis: let the next call probe
		}
		return fail(err)
	}
	return n, probe, nil
}

// forKey returns the node that serves key. On a cluster, finding it can
// block until go-redis has loaded the cluster's slots, whatever the context
// says, so that runs within timeout, behind the breaker of the cluster as a
// whole (ns.one): a cluster whose slots cannot be loaded fails like a dead
// Redis, and fails fast once that breaker opens.
func (ns *nodes) forKey(ctx context.Context, timeout time.Duration, key string) (*node, error) {
	if ns.ring != nil {
		return ns.shardFor(key)
	}
	if ns.cluster == nil {
		return ns.one, nil
	}
	ok, probe := ns.one.brk.allow()
	if !ok {
		return ns.one, ErrCircuitOpen
	}
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	master, err := bounded(cctx, func() (*redis.Client, error) { return ns.cluster.MasterForKey(cctx, key) })
	if err != nil {
		if ctx.Err() != nil {
			ns.one.brk.abandon()
			return ns.one, fmt.Errorf("%w: %w", ErrClientGone, context.Cause(ctx))
		}
		ns.one.brk.done(probe, true)
		return ns.one, fmt.Errorf("no master for the key: %w", err)
	}
	ns.one.brk.done(probe, false)
	ns.one.health.note(ns.watch, false, nil)
	addr := master.Options().Addr
	if n, ok := ns.byAddr.Load(addr); ok {
		return n.(*node), nil
	}
	n, _ := ns.byAddr.LoadOrStore(addr, ns.newNode(master))
	return n.(*node), nil
}

// shardFor returns the node of the Ring shard that serves key. The Ring
// finds it in memory; when it has no shard up, that is a Redis failure of
// the Ring as a whole (ns.one), and a shard found is its success.
func (ns *nodes) shardFor(key string) (*node, error) {
	shard, err := ns.ring.GetShardClientForKey(key)
	if err != nil {
		ok, probe := ns.one.brk.allow()
		if !ok {
			return ns.one, ErrCircuitOpen
		}
		ns.one.brk.done(probe, true)
		return ns.one, fmt.Errorf("no Ring shard for the key: %w", err)
	}
	// The Ring has a shard up again: its breaker, reported for decisions
	// that reach no node, closes (done is two loads when it is closed).
	ns.one.brk.done(false, false)
	ns.one.health.note(ns.watch, false, nil)
	if n, ok := ns.byShard.Load(shard); ok {
		return n.(*node), nil
	}
	return ns.addShard(shard), nil
}

// settle judges how a call of n ended (see judge), tells the breaker, and
// returns whether it was a Redis failure and the error to answer with.
func (e *Engine) settle(ctx context.Context, n *node, probe bool, answered uint64, err error) (bool, error) {
	failed, err := n.judge(ctx, answered, err)
	if NoVerdict(err) {
		// No verdict on Redis, either way: the breaker's count of failures
		// in a row stands, and a probe lets the next call probe.
		if probe {
			n.brk.abandon()
		}
		return failed, err
	}
	n.brk.done(probe, failed)
	n.outage().note(e.nodes.watch, failed, err)
	return failed, err
}

// judge classifies how a call of n ended, for the breaker and the caller:
// it returns whether the call is a Redis failure, and the error to answer
// with. answered is n's count of answered calls when the call started;
// ctx is the request's own context.
func (n *node) judge(ctx context.Context, answered uint64, err error) (bool, error) {
	switch {
	case err == nil:
		n.answered.Add(1)
		return false, nil
	case ctx.Err() != nil:
		// The request's own context ended: that says nothing about Redis.
		// The call may have reached Redis all the same (mayHaveRun).
		return false, mayHaveRun{fmt.Errorf("%w: %w", ErrClientGone, context.Cause(ctx))}
	case errors.Is(err, ErrSaturated):
		return false, err // the node said this process was late (node.call)
	case (errors.Is(err, errTimedOut) || isNetTimeout(err)) && n.answered.Load() == answered:
		return true, err // on the wire, and Redis answered nothing of this node's in time
	case errors.Is(err, errTimedOut) || isNetTimeout(err):
		// Redis answered other calls in time while this one waited, so it
		// serves: this call waited behind this process's own.
		return false, mayHaveRun{fmt.Errorf("%w: %w", ErrSaturated, err)}
	case errors.Is(err, context.DeadlineExceeded) && n.stranded.Load() == 0 && poolBusy(n.pool):
		// go-redis gave up before the call reached the socket, with every
		// connection of the pool busy: the engine never has more calls on
		// the wire than the pool has connections, and none of its abandoned
		// calls hold one, so the application's own commands hold them.
		// That is a busy client, not a failing Redis.
		return false, fmt.Errorf("%w: %w", ErrSaturated, err)
	case (errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)) && n.stranded.Load() == 0:
		// go-redis found no free connection (its PoolTimeout ran out, or
		// MaxActiveConns was reached), and none of the engine's abandoned
		// calls holds one: a busy client, not a failing Redis.
		return false, fmt.Errorf("%w: %w", ErrSaturated, err)
	}
	return unavailable(err), err
}

// NoVerdict reports whether err, a call's error, says nothing about Redis:
// the process was saturated, or the request's own context ended.
func NoVerdict(err error) bool {
	return errors.Is(err, ErrSaturated) || errors.Is(err, ErrClientGone)
}

// MayHaveRun reports whether err, an ErrSaturated or ErrClientGone of a
// call, came after the call was handed to go-redis, so that the script may
// have run in Redis: what it would have taken (a lease, say) must then be
// given back all the same.
func MayHaveRun(err error) bool {
	var ran mayHaveRun
	return errors.As(err, &ran)
}

// mayHaveRun marks an error of MayHaveRun.
type mayHaveRun struct{ error }

func (e mayHaveRun) Unwrap() error { return e.error }

// Breaker is a node's consecutive-failure circuit breaker: after a
// threshold of Redis failures in a row it stops calling the node for a
// while, then lets a single probe through, whose success closes it. A nil
// *Breaker is no breaker: it lets every call through. It is safe for
// concurrent use and takes no lock.
type Breaker struct {
	threshold int32
	open      int64 // ns
	base      time.Time

	failures  atomic.Int32
	openUntil atomic.Int64 // ns since base; 0 when closed
	probing   atomic.Bool
}

// newBreaker returns a breaker, or nil for failures <= 0 (none). The
// caller checks that failures fits an int32.
func newBreaker(failures int, open time.Duration) *Breaker {
	if failures <= 0 {
		return nil
	}
	return &Breaker{threshold: int32(failures), open: int64(open), base: time.Now()}
}

func (b *Breaker) now() int64 { return int64(time.Since(b.base)) }

// allow reports whether a call may go to Redis, and whether it is the
// half-open probe (which must be followed by done or abandon).
func (b *Breaker) allow() (ok, probe bool) {
	if b == nil {
		return true, false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if b.now() < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// done records a call's outcome.
func (b *Breaker) done(probe, failed bool) {
	if b == nil {
		return
	}
	if !failed {
		if b.openUntil.Load() != 0 || b.failures.Load() != 0 {
			b.failures.Store(0)
			b.openUntil.Store(0)
		}
		if probe {
			b.probing.Store(false)
		}
		return
	}
	if n := b.failures.Add(1); n >= b.threshold || probe {
		b.openUntil.Store(b.now() + b.open)
	}
	if probe {
		b.probing.Store(false)
	}
}

// abandon ends a probe that allow let through without a verdict on Redis
// (the call never reached it), so that the next call can probe.
func (b *Breaker) abandon() {
	if b != nil {
		b.probing.Store(false)
	}
}

// State returns "closed", "open" or "half-open", or "" for no breaker.
func (b *Breaker) State() string {
	if b == nil {
		return ""
	}
	until := b.openUntil.Load()
	switch {
	case until == 0:
		return "closed"
	case b.now() < until:
		return "open"
	}
	return "half-open"
}

// Failures returns how many Redis failures in a row the breaker has
// counted since a call last succeeded; 0 for no breaker.
func (b *Breaker) Failures() int {
	if b == nil {
		return 0
	}
	return int(b.failures.Load())
}

// unavailable reports whether err means Redis could not serve, as opposed to
// a reply error from a healthy server (WRONGTYPE on one bad key, say), which
// must not open the breaker for every other key of the same node.
func unavailable(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // network errors, timeouts, closed pools
	}
	msg := rerr.Error()
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "TRYAGAIN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
