package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// transport is how the calls of one client reach Redis once they have a
// node and a slot: directly or through the auto-pipeliner, failing fast
// when the node's server is gone (call), bounded in time (callContext,
// bounded), with each call's EVALSHA and reply in one allocation (wire).
// It knows the scripts it has run (scriptOf). It is safe for concurrent
// use.
type transport struct {
	client    redis.Scripter
	honours   bool                 // the client bounds reads by the context deadline
	cluster   bool                 // the client is a *redis.ClusterClient
	bound     *redis.Client        // a plain client's clone that bounds reads by the context
	pipe      *redis.AutoPipeliner // nil without AutoPipeline or on other clients
	pipeAbove atomic.Int64         // pipelineAbove; tests lower it
	calls     atomic.Int64         // calls now waiting on Redis, when pipelining
	bounds    sync.Map             // Timeout -> *deadlines
	scripts   sync.Map             // *redis.Script -> *script
}

// send puts one call on the wire of n, in w's memory: through the
// auto-pipeliner when enough calls already wait on Redis, otherwise
// directly. Lease calls never go through the pipeliner, so they never wait
// behind its backlog, and go on their own pool when n is the lease lane's
// (see lease.go); on a cluster, one that a master redirects (its slot
// moved) goes through the cluster client, which follows the redirection.
func (t *transport) send(ctx context.Context, l lane, n *node, w *wire, s *redis.Script, keys []string, args []any) ([]int64, error) {
	if n.own {
		reply, err := t.runDirect(ctx, n, w, s, keys, args)
		if redirected(err) {
			return t.runDirect(ctx, n.main, w, s, keys, args)
		}
		return reply, err
	}
	if t.pipe == nil || l != decisionLane {
		return t.runDirect(ctx, n, w, s, keys, args)
	}
	defer t.calls.Add(-1)
	if t.calls.Add(1) > t.pipeAbove.Load() {
		return t.runPipelined(ctx, n, w, s, keys, args)
	}
	return t.runDirect(ctx, n, w, s, keys, args)
}

// runDirect runs s on the node n and returns no later than ctx is done,
// failing fast when n's server is gone (node.call). It is a plain call,
// with no goroutine, on a client that bounds its socket reads by the
// context (ContextTimeoutEnabled), and on a plain *redis.Client without
// that, through its clone that does (t.bound, on the same pool). On other
// clients, and on a *redis.ClusterClient (which can block on loading the
// cluster's slots whatever the context says), the call runs in a goroutine
// and is abandoned when ctx ends: the request is answered on time, and the
// goroutine ends at the client's own ReadTimeout. At most the client's pool
// size of such goroutines can wait on a hung server, because waiting for a
// pooled connection does honour ctx.
func (t *transport) runDirect(ctx context.Context, n *node, w *wire, s *redis.Script, keys []string, args []any) ([]int64, error) {
	return call(ctx, n, w.start, func() ([]int64, error) {
		w := w.take()
		switch {
		case n.own:
			return t.evalSha(ctx, n.pool, w, s, keys, args) // the lease pool: bounded by ctx
		case t.honours && !t.cluster:
			return t.evalSha(ctx, t.client, w, s, keys, args)
		case t.bound != nil:
			return t.evalSha(ctx, t.bound, w, s, keys, args)
		}
		return boundedCounting(ctx, &n.stranded, func() ([]int64, error) { return t.evalSha(ctx, t.client, w, s, keys, args) })
	})
}

// runPipelined submits the script's EVALSHA to the auto-pipeliner and waits
// for it no longer than ctx. The pipeliner runs commands on its own context,
// so WaitContext is what bounds the wait; a command abandoned that way still
// executes. On NOSCRIPT (after SCRIPT FLUSH or a restart) the script is run
// once through the plain client (or its clone), whose EVAL loads it again.
// Like runDirect, it fails fast when n's server is gone (node.call).
func (t *transport) runPipelined(ctx context.Context, n *node, w *wire, s *redis.Script, keys []string, args []any) ([]int64, error) {
	return call(ctx, n, w.start, func() ([]int64, error) { return t.pipelined(ctx, w.take(), s, keys, args) })
}

// pipelined is one attempt of runPipelined, in w's memory.
func (t *transport) pipelined(ctx context.Context, w *wire, s *redis.Script, keys []string, args []any) ([]int64, error) {
	sc := t.scriptOf(s)
	cmd := w.command(ctx, sc, keys, args)
	err := t.pipe.Submit(ctx, cmd).WaitContext(ctx)
	if err == nil {
		return w.reply(sc, cmd)
	}
	if noScript(err) {
		if t.bound != nil {
			return ints(s.Run(ctx, t.bound, keys, args...))
		}
		return ints(s.Run(ctx, t.client, keys, args...))
	}
	if ctx.Err() != nil {
		return nil, cause(ctx)
	}
	return nil, err
}

// call runs f, a call to the node's server, and fails fast when the server
// is gone. go-redis does not: a connection it cannot make is dialed
// DialerRetries times (5, 100 ms apart, by default), and its pool belongs
// to the application, so the engine cannot change that. So once a call has
// failed (down), the next one first dials the server itself (reach), once,
// as go-redis's pool does (the Options' Dialer, Network and Addr; a
// DialHook is not followed): a refused connection then fails the call at
// once, a connection that opens lets it go on to go-redis. A call whose
// connection broke (reset, or closed by the server) is made once more,
// when a dial shows the server takes connections: a healthy Redis that
// reset one connection (a restarted proxy, an idle timeout) fails no
// request, and a Redis that went away costs one refused dial. The script
// may have run before the connection broke, so this may count a request
// twice, as go-redis's own retry of a broken connection does. A call that
// ran out of its Timeout is a Redis failure only if Redis does not answer
// a PING either (see answers); otherwise it is ErrSaturated. start is when
// the call began (its Timeout counts from then). T is the reply's type.
func call[T any](ctx context.Context, n *node, start time.Time, f func() (T, error)) (T, error) {
	var none T
	if n.down.Load() {
		if err := n.reach(ctx); err != nil {
			return none, err
		}
		start = time.Now() // the call on the wire starts after the dial
	}
	answered := n.answered.Load()
	reply, err := f()
	if err == nil || !connFailure(err) {
		return reply, err
	}
	n.down.Store(true)
	if broken(err) {
		switch why := n.reach(ctx); {
		case why == nil:
			if reply, err = f(); err == nil || !connFailure(err) {
				return reply, err
			}
			n.down.Store(true)
		case !errors.Is(why, ErrSaturated):
			// Say why no new connection opens (refused, say): the broken
			// one's EOF alone does not tell that the server is gone. The
			// text only: the call is judged on its own error.
			err = fmt.Errorf("%w; a new connection: %v", err, why)
		}
	}
	err = deadlineOf(ctx, err)
	// A call that ran out of its Timeout (go-redis may report it as the
	// context's bare error) while no other call was answered, and not for
	// want of a pooled connection (judge tells that apart).
	timedOut := errors.Is(err, context.DeadlineExceeded) && errors.Is(cause(ctx), errTimedOut)
	if timedOut && n.answered.Load() == answered && !poolBusy(n.pool) {
		why := n.answers(ctx, start)
		if why == nil {
			return none, mayHaveRun{fmt.Errorf("%w: the call ran out of its Timeout, yet Redis answered a PING: this process read the reply late", ErrSaturated)}
		}
		if why != errNoPing && !errors.Is(why, context.DeadlineExceeded) {
			// go-redis reports a dial it was still retrying as the bare
			// deadline: say why Redis did not answer (refused, say). The
			// error is judged as before: why adds no timeout and no reply.
			err = fmt.Errorf("%w; a new connection: %w", err, why)
		}
	}
	return none, err
}

// texts runs s on n's lease pool, or the client's when n has none, bounded
// by ctx, and reads its reply as strings.
func (t *transport) texts(ctx context.Context, n *node, s *redis.Script, keys []string, args []any) ([]string, error) {
	var c redis.Scripter = t.client
	switch {
	case n.own:
		reply, err := s.Run(ctx, n.pool, keys, args...).StringSlice()
		if redirected(err) {
			return bounded(ctx, func() ([]string, error) { return s.Run(ctx, t.client, keys, args...).StringSlice() })
		}
		return reply, err
	case t.bound != nil:
		c = t.bound
	}
	return bounded(ctx, func() ([]string, error) { return s.Run(ctx, c, keys, args...).StringSlice() })
}

// errTimedOut is the cause of a call's context when its Timeout ran out.
//
//lint:ignore ST1005 Redis is a proper noun, and the text is what a user reads
var errTimedOut = fmt.Errorf("Redis did not answer within the Timeout: %w", context.DeadlineExceeded)

// callContext returns the context that bounds the call of w on the wire,
// which starts at w.start: it ends timeout after that, or up to
// timeout/deadlineSteps later (never earlier), or at ctx's own deadline
// when that comes first, and carries ctx's values (a tracing hook's span,
// say). A call on the shared deadline gets w.ctx as its context (no
// allocation of its own: see wire). The returned cancel is nil when there
// is nothing to release.
//
// A call shares its deadline with every call of the engine that starts
// within the same step, so a call pays for no context, timer or channel of
// its own (context.WithTimeout allocates and starts a timer on every
// call). The price: once a call is on the wire, the request's cancellation
// no longer ends it early, only its deadline and the Timeout do; the
// script runs in Redis all the same, and its answer is still read. A
// request whose context has already ended, or whose deadline comes before
// the shared one, gets a context of its own.
func (t *transport) callContext(ctx context.Context, timeout time.Duration, w *wire) (context.Context, context.CancelFunc) {
	d, ok := t.bounds.Load(timeout)
	if !ok {
		d, _ = t.bounds.LoadOrStore(timeout, &deadlines{timeout: timeout, step: max(timeout/deadlineSteps, time.Microsecond)})
	}
	bound, end := d.(*deadlines).at(w.start)
	if ctx.Err() != nil {
		return context.WithTimeoutCause(ctx, timeout, errTimedOut)
	}
	if own, ok := ctx.Deadline(); ok && own.Before(end) {
		return context.WithTimeoutCause(ctx, timeout, errTimedOut)
	}
	w.ctx = callCtx{Context: ctx, bound: bound}
	return &w.ctx, nil
}

// deadlineSteps is how many shared deadlines a Timeout is divided into: a
// call's bound is at most Timeout/deadlineSteps longer than its Timeout.
const deadlineSteps = 64

// deadlines hands out the shared deadlines of one Timeout. It is safe for
// concurrent use.
type deadlines struct {
	timeout, step time.Duration
	cur           atomic.Pointer[deadline]
}

// deadline is a context that ends timeout after until, shared by the calls
// that start before until and no earlier than one step before it.
type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc // never needed: the context ends at its deadline
	until  time.Time
	end    time.Time
}

// at returns the shared context of a call that starts at now, and its
// deadline: no earlier than now + timeout.
func (ds *deadlines) at(now time.Time) (context.Context, time.Time) {
	if d := ds.cur.Load(); d != nil && now.Before(d.until) {
		return d.ctx, d.end
	}
	// Two calls may both start a new step; the later Store wins and the
	// other context serves its one call, then ends at its deadline.
	d := &deadline{until: now.Add(ds.step)}
	d.end = d.until.Add(ds.timeout)
	d.ctx, d.cancel = context.WithDeadlineCause(context.Background(), d.end, errTimedOut)
	ds.cur.Store(d)
	return d.ctx, d.end
}

// callCtx is a call's context: the request's values, and the shared
// deadline (see callContext).
type callCtx struct {
	context.Context                 // the request's, for its values
	bound           context.Context // a shared deadline
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.bound.Deadline() }
func (c *callCtx) Done() <-chan struct{}       { return c.bound.Done() }
func (c *callCtx) Err() error                  { return c.bound.Err() }

// cause returns why a call's context (from callContext) ended:
// errTimedOut when its Timeout ran out.
func cause(ctx context.Context) error {
	if c, ok := ctx.(*callCtx); ok {
		return context.Cause(c.bound)
	}
	return context.Cause(ctx)
}

// boundedGrace is how long bounded waits, once ctx has ended, for f to
// return: go-redis ends a wait for a pooled connection with the context, so
// such a call returns its own context error at once, while a call on the
// wire of a client that ignores the context does not return. "At once" is
// its goroutine being scheduled, which on a loaded machine takes longer
// than a millisecond: a call that only waited for a connection the
// application held was then taken for one Redis left unanswered (a
// failure, and a stranded call making its siblings' pool waits failures
// too). 20 ms is a heuristic, not a proof: go-redis does not say whether a
// call has its connection. It applies only to a ClusterClient or Ring
// without ContextTimeoutEnabled.
const boundedGrace = 20 * time.Millisecond

// bounded runs f in a goroutine and returns its result, or ctx's cause once
// ctx has ended and f has not returned within boundedGrace.
func bounded[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return boundedCounting(ctx, nil, f)
}

// boundedCounting is bounded, and while f runs on after being abandoned,
// it counts f in stranded (when not nil).
func boundedCounting[T any](ctx context.Context, stranded *atomic.Int64, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	// state: 0 while both wait, 1 once the caller abandoned f (and
	// counted it), 2 once f returned first.
	var state atomic.Int32
	go func() {
		v, err := f()
		done <- result{v, err}
		if !state.CompareAndSwap(0, 2) && stranded != nil {
			stranded.Add(-1)
		}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(boundedGrace)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-grace.C:
	}
	// Counted before the CAS that lets f's goroutine uncount it, so the
	// count never dips below zero (which judge would read as stranded calls).
	if stranded != nil {
		stranded.Add(1)
	}
	if !state.CompareAndSwap(0, 1) {
		if stranded != nil {
			stranded.Add(-1)
		}
		r := <-done // f returned just now
		return r.v, r.err
	}
	var zero T
	return zero, cause(ctx)
}

// wire is the memory of one call to Redis, in one allocation: the context
// that bounds it (callContext), its EVALSHA's arguments, and its reply's
// integers. Made apart, as Script.Run and lua.Ints make them, they cost an
// allocation each on every decision. A wire is never reused: a call
// abandoned at its deadline may still be written, and read into, by
// go-redis (the pipeliner runs what it was given) or by its goroutine
// (bounded).
type wire struct {
	start time.Time // when the call began (runOn)
	ctx   callCtx
	used  bool // an attempt took it (see take)
	args  [wireArgs]any
	ints  [wireInts]int64
}

// A wire holds what a single-rule decision needs, no more, so that it
// stays small (the garbage collector's work grows with it); a call that
// needs more allocates it apart.
const (
	// wireArgs holds the EVALSHA of a single-rule decision: the command,
	// the SHA1, the key count, the key, the clock and the cost.
	wireArgs = 6
	// wireInts holds a single-rule decision's reply: six integers (see
	// lua.Single).
	wireInts = 6
)

// take returns w for a call's first attempt, and a wire of its own for a
// retry (node.call tries again on a broken connection), whose first
// attempt may still be running in an abandoned goroutine (bounded).
func (w *wire) take() *wire {
	if w.used {
		return &wire{used: true}
	}
	w.used = true
	return w
}

// script is what an engine keeps of a script it has run.
type script struct {
	// sha is the script's SHA1, boxed once: boxing a string for the
	// command's arguments is an allocation on every call.
	sha any
	// packed is set once the script replied a string. A string reply is
	// then read as a string (redis.StringCmd): a generic reply (redis.Cmd)
	// would box it, an allocation on every call. ginlimit's decision
	// scripts reply their integers packed in a string (see lua.Ints); the
	// in-flight script and a few others reply an array, which only a
	// generic command can read. A script's reply always has the same shape
	// (a reply error aside), so its first reply tells which it is.
	packed atomic.Bool
}

// scriptOf returns what e keeps of s.
func (t *transport) scriptOf(s *redis.Script) *script {
	if v, ok := t.scripts.Load(s); ok {
		return v.(*script)
	}
	v, _ := t.scripts.LoadOrStore(s, &script{sha: s.Hash()})
	return v.(*script)
}

// command returns the EVALSHA of sc on keys with args, in w's memory, on
// the call's context ctx.
func (w *wire) command(ctx context.Context, sc *script, keys []string, args []any) redis.Cmder {
	a := w.args[:0]
	if n := 3 + len(keys) + len(args); n > len(w.args) {
		a = make([]any, 0, n)
	}
	a = append(a, "evalsha", sc.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	var cmd redis.Cmder
	if sc.packed.Load() {
		cmd = redis.NewStringCmd(ctx, a...)
	} else {
		cmd = redis.NewCmd(ctx, a...)
	}
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // as go-redis's Eval does: the cluster's slot is keys[0]'s
	}
	return cmd
}

// reply returns the integers of cmd's reply, cmd being a command of sc
// that succeeded, in w's memory; and notes whether sc replies a string.
func (w *wire) reply(sc *script, cmd redis.Cmder) ([]int64, error) {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		return unpack(w.ints[:0], c.Val())
	case *redis.Cmd:
		v := c.Val()
		if _, ok := v.(string); ok {
			sc.packed.Store(true)
		}
		return decode(w.ints[:0], v)
	}
	return nil, fmt.Errorf("unexpected command %T", cmd)
}

// processor is a client that runs a command it is given, as
// *redis.Client, *redis.ClusterClient and *redis.Ring do.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// evalSha runs s on c as Script.Run does (EVALSHA, then EVAL on
// NOSCRIPT), with the command's memory in w when c runs the commands it is
// given, and returns the reply's integers.
func (t *transport) evalSha(ctx context.Context, c redis.Scripter, w *wire, s *redis.Script, keys []string, args []any) ([]int64, error) {
	p, ok := c.(processor)
	if !ok {
		return ints(s.Run(ctx, c, keys, args...))
	}
	sc := t.scriptOf(s)
	cmd := w.command(ctx, sc, keys, args)
	err := p.Process(ctx, cmd)
	switch {
	case err == nil:
		return w.reply(sc, cmd)
	case noScript(err):
		return ints(s.Eval(ctx, c, keys, args...))
	}
	return nil, err
}

// noScript reports whether err says Redis does not know the script (after
// SCRIPT FLUSH or a restart).
func noScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// ints returns the integers of a script's reply (see decode).
func ints(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return decode(nil, v)
}

// decode appends to dst the integers of a script's reply: a string of 8
// bytes per integer, big-endian and two's complement, as the scripts reply
// (lua.Ints reads the same format: TestDecodeAgreesWithLuaInts); or, from
// a fake that answers in their place, an array of integers.
func decode(dst []int64, reply any) ([]int64, error) {
	switch r := reply.(type) {
	case string:
		return unpack(dst, r)
	case []any:
		for i, v := range r {
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("unexpected reply element %d of type %T", i, v)
			}
			dst = append(dst, n)
		}
		return dst, nil
	}
	return nil, fmt.Errorf("unexpected reply of type %T", reply)
}

// unpack appends to dst the integers packed in a script's string reply (see
// decode).
func unpack(dst []int64, r string) ([]int64, error) {
	if len(r)%8 != 0 {
		return nil, fmt.Errorf("unexpected reply of %d bytes", len(r))
	}
	for i := 0; i < len(r); i += 8 {
		var v uint64
		for j := i; j < i+8; j++ {
			v = v<<8 | uint64(r[j])
		}
		dst = append(dst, int64(v))
	}
	return dst, nil
}
