package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/lua"
)

// Run sends one script call to the node that serves keys[0] (every key of
// a call is in one slot) and returns the reply, as integers.
//
// Time spent in this process is not Redis failing, so the call's stages
// are bounded apart:
//
//   - the node's circuit breaker is asked first: open, the call fails at
//     once with ErrCircuitOpen;
//   - the call then waits for one of the node's slots, which are as many as
//     the client's connection pool (so go-redis need not make it wait for a
//     connection), bounded by ctx, by queue, and by how many calls may wait
//     (maxWaiting); running out of any is ErrSaturated;
//   - once it has a slot, Redis has timeout to answer.
//
// A failure counts against the breaker only when it means Redis could not
// serve: a network error, or Redis not answering within timeout, while the
// request itself was still waiting and Redis answered no other call of the
// node either. A call that times out while Redis answers others in time
// waited behind this process's own calls (the auto-pipeliner's backlog on
// the wire, or a connection of its own that stalls): that is a busy client,
// not a failing Redis, so it is ErrSaturated. A saturated call is no
// verdict on Redis at all: it neither counts as a failure nor resets the
// count. Run returns the node's breaker, nil when there is none.
func (e *Engine) Run(ctx context.Context, queue, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *Breaker, error) {
	return e.runOn(ctx, decisionLane, queue, timeout, s, keys, args)
}

// RunLease is Run for a lease's renewal or release: it waits for the
// node's lease slots, never behind the calls queued for its other slots,
// and goes to Redis directly, never behind the auto-pipeliner's backlog;
// so a flood of decisions on this process cannot make a lease it holds
// lapse while Redis answers. A wait for a lease slot is bounded by timeout.
func (e *Engine) RunLease(ctx context.Context, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *Breaker, error) {
	return e.runOn(ctx, leaseLane, timeout, timeout, s, keys, args)
}

// lane is which of a node's capacities a call waits for.
type lane bool

const (
	decisionLane lane = false // decisions, peeks, resets: the node's slots
	leaseLane    lane = true  // lease renewals and releases: its lease slots
)

// runOn is Run on lane l.
func (e *Engine) runOn(ctx context.Context, l lane, queue, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *Breaker, error) {
	n, err := e.nodes.forKey(ctx, timeout, keys[0])
	if err != nil {
		return nil, n.brk, err
	}
	ok, probe := n.brk.allow()
	if !ok {
		return nil, n.brk, ErrCircuitOpen
	}
	if err := n.acquire(ctx, l, queue); err != nil {
		if probe {
			n.brk.abandon() // not a verdict on Redis: let the next call probe
		}
		return nil, n.brk, err
	}
	defer n.release(l)
	answered := n.answered.Load()
	cctx, cancel := e.callContext(ctx, timeout)
	if cancel != nil {
		defer cancel()
	}
	reply, err := e.send(cctx, l, n, s, keys, args)
	failed, err := n.judge(ctx, answered, err)
	if NoVerdict(err) {
		// No verdict on Redis, either way: the breaker's count of failures
		// in a row stands, and a probe lets the next call probe.
		if probe {
			n.brk.abandon()
		}
	} else {
		n.brk.done(probe, failed)
	}
	return reply, n.brk, err
}

// send puts one call on the wire of n: through the auto-pipeliner when
// enough calls already wait on Redis, otherwise directly. Lease calls
// never go through the pipeliner, so they never wait behind its backlog.
func (e *Engine) send(ctx context.Context, l lane, n *node, s *redis.Script, keys []string, args []any) ([]int64, error) {
	if e.pipe == nil || l != decisionLane {
		return e.runDirect(ctx, n, s, keys, args)
	}
	defer e.calls.Add(-1)
	if e.calls.Add(1) > e.pipeAbove.Load() {
		return e.runPipelined(ctx, n, s, keys, args)
	}
	return e.runDirect(ctx, n, s, keys, args)
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

// poolBusy reports whether every connection of c's pool (the pool that
// serves the call's key: a plain client's, a cluster master's or a Ring
// shard's) is in use; false for a nil c. A bare deadline error can mean a
// wait for a connection or go-redis backing off between retries on a dead
// Redis; only the first leaves the pool full of busy connections.
func poolBusy(c *redis.Client) bool {
	if c == nil {
		return false
	}
	st := c.PoolStats()
	return st.TotalConns > st.IdleConns && int(st.TotalConns-st.IdleConns) >= c.Options().PoolSize
}

// isNetTimeout reports whether err is a timeout of a network operation (a
// socket deadline), as opposed to a context's deadline, which implements
// net.Error too.
func isNetTimeout(err error) bool {
	var ne net.Error
	return !errors.Is(err, context.DeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}

// runDirect runs s on the node n and returns no later than ctx is done,
// failing fast when n's server is gone (node.call). It is a plain call,
// with no goroutine, on a client that bounds its socket reads by the
// context (ContextTimeoutEnabled), and on a plain *redis.Client without
// that, through its clone that does (e.bound, on the same pool). On other
// clients, and on a *redis.ClusterClient (which can block on loading the
// cluster's slots whatever the context says), the call runs in a goroutine
// and is abandoned when ctx ends: the request is answered on time, and the
// goroutine ends at the client's own ReadTimeout. At most the client's pool
// size of such goroutines can wait on a hung server, because waiting for a
// pooled connection does honour ctx.
func (e *Engine) runDirect(ctx context.Context, n *node, s *redis.Script, keys []string, args []any) ([]int64, error) {
	return n.call(ctx, func() ([]int64, error) {
		switch {
		case e.honours && !e.nodes.isCluster():
			return ints(s.Run(ctx, e.client, keys, args...))
		case e.bound != nil:
			return ints(s.Run(ctx, e.bound, keys, args...))
		}
		return boundedCounting(ctx, &n.stranded, func() ([]int64, error) { return ints(s.Run(ctx, e.client, keys, args...)) })
	})
}

// runPipelined submits the script's EVALSHA to the auto-pipeliner and waits
// for it no longer than ctx. The pipeliner runs commands on its own context,
// so WaitContext is what bounds the wait; a command abandoned that way still
// executes. On NOSCRIPT (after SCRIPT FLUSH or a restart) the script is run
// once through the plain client (or its clone), whose EVAL loads it again.
// Like runDirect, it fails fast when n's server is gone (node.call).
func (e *Engine) runPipelined(ctx context.Context, n *node, s *redis.Script, keys []string, args []any) ([]int64, error) {
	return n.call(ctx, func() ([]int64, error) { return e.pipelined(ctx, s, keys, args) })
}

// pipelined is one call of runPipelined.
func (e *Engine) pipelined(ctx context.Context, s *redis.Script, keys []string, args []any) ([]int64, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	err := e.pipe.Submit(ctx, cmd).WaitContext(ctx)
	if err == nil {
		return ints(cmd)
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		if e.bound != nil {
			return ints(s.Run(ctx, e.bound, keys, args...))
		}
		return ints(s.Run(ctx, e.client, keys, args...))
	}
	if ctx.Err() != nil {
		return nil, cause(ctx)
	}
	return nil, err
}

// ints returns the integers of a script's reply (see lua.Ints).
func ints(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return lua.Ints(v)
}
