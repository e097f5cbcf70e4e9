package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/lua"
)

// backend is the Redis call path of one client: it knows the scripts, the
// circuit breakers, auto-pipelining and how a call is bounded in time, and
// nothing about HTTP or policy. A [Limiter] keeps one per client (and per
// breaker and pipelining setting), which every route on it shares. It is
// safe for concurrent use.
type backend struct {
	client    redis.Scripter
	honours   bool                 // the client bounds reads by the context deadline
	bound     *redis.Client        // a plain client's clone that bounds reads by the context
	pipe      *redis.AutoPipeliner // nil without AutoPipeline or on other clients
	pipeAbove int64                // pipelineAbove; tests lower it
	calls     atomic.Int64         // calls now waiting on Redis, when pipelining
	nodes     *nodes               // the breaker and the slots of each node
	hub       *hub                 // the reset subscription (coherence.go), or nil
	bounds    sync.Map             // Timeout -> *deadlines
	loaded    bool                 // the scripts loaded at start-up: Redis answered
	mu        sync.Mutex           // guards prepared
	prepared  map[string]bool      // SHA1s of the rules' scripts seen by prepare
}

// backendKey tells the backends of a limiter apart.
type backendKey struct {
	client        redis.Scripter
	breakFailures int
	breakOpen     time.Duration
	autoPipeline  bool
}

// shareable reports whether k can be a map key: a client value that is not
// comparable (a struct holding a map, say) gets a backend of its own on
// every route.
func (k backendKey) shareable() bool {
	return reflect.ValueOf(k.client).Comparable()
}

// newBackend returns the backend of k's client and loads every script on
// it; with subscribe, it subscribes to resets (coherence.go).
func newBackend(k backendKey, subscribe bool) (*backend, error) {
	b := &backend{
		client:    k.client,
		honours:   honoursContext(k.client),
		pipeAbove: pipelineAbove,
	}
	if c, ok := k.client.(*redis.Client); ok && !b.honours {
		// A clone (the same pool) of the application's client, that bounds
		// socket reads by the call's deadline: no goroutine per call, and
		// the application's own client is left as it is.
		b.bound = ownClone(c)
	}
	if k.autoPipeline {
		// Only a plain client: go-redis's cluster auto-pipeliner shares
		// batches across masters, so one dead master would stall the
		// others, and Ring does not auto-pipeline at all.
		if c, ok := k.client.(*redis.Client); ok {
			// go-redis caches one async auto-pipeliner per *redis.Client,
			// shared by all its callers: the first caller's options win,
			// and its Close ends it for everyone. So ginlimit's is made on
			// a clone of the application's client (the same pool), which
			// caches its own: its options hold, the application's own
			// auto-pipeliner is left as it is, and closing the Limiter ends
			// only ginlimit's.
			own := ownClone(c)
			var err error
			if b.pipe, err = own.AsyncAutoPipelineWithOptions(pipelineOptions()); err != nil {
				return nil, fmt.Errorf("AutoPipeline(true): %w", err)
			}
		}
	}
	slots := poolSize(k.client)
	if b.pipe != nil {
		slots *= pipelineDepth // calls share connections
	}
	b.nodes = newNodes(k.client, k.breakFailures, k.breakOpen, slots)
	if b.bound != nil {
		b.nodes.one.pool = b.bound // the same pool, and ginlimit's options
	}
	wait := time.Duration(0)
	err := b.load(allScripts...)
	if b.loaded = err == nil; b.loaded {
		wait = subscribeWait // Redis answers: the subscription will not be long
	} else if connFailure(err) {
		// A Redis that is down from the start fails the first decision as
		// fast as the next ones (see node.call).
		b.nodes.one.down.Store(true)
	}
	if subscribe {
		b.hub = startHub(b, wait)
	}
	return b, nil
}

// close ends what the backend runs in the background.
func (b *backend) close() {
	b.hub.close()
	if b.pipe != nil {
		_ = b.pipe.Close() // ends its goroutines; calls still waiting get an error
	}
}

// allScripts are the scripts every backend loads at start-up; each rule's
// single-rule script is loaded when its route is compiled (prepare).
var allScripts = []*redis.Script{severalScript, peekScript, resetScript, publishScript, slotScript}

// load loads scripts now, best effort, so that the first burst of
// decisions does not meet NOSCRIPT and send each script twice. Run handles
// NOSCRIPT anyway, so a failure here costs nothing, and a dead Redis delays
// start-up by loadTimeout at most. It returns nil once every script loaded.
func (b *backend) load(scripts ...*redis.Script) error {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	_, err := bounded(ctx, func() (struct{}, error) {
		for _, s := range scripts {
			if err := s.Load(ctx, b.client).Err(); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// prepare loads a rule's single-rule script (its settings written in, so
// there is one per distinct rule) on this backend's Redis once: at once
// when Redis answered at start-up (see load), otherwise on its first call.
func (b *backend) prepare(s *redis.Script) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prepared[s.Hash()] {
		return
	}
	if b.prepared == nil {
		b.prepared = map[string]bool{}
	}
	b.prepared[s.Hash()] = true
	if b.loaded {
		// After one failure, later rules load on their first call, so a
		// Redis that hung since start-up delays each route by no timeout.
		b.loaded = b.load(s) == nil
	}
}

// loadTimeout bounds loading the scripts at start-up. It is short because
// a RateLimit without a Limiter makes its backend on the route's first
// request.
const loadTimeout = 100 * time.Millisecond

// errTimedOut is the cause of a call's context when its Timeout ran out.
var errTimedOut = fmt.Errorf("Redis did not answer within the Timeout: %w", context.DeadlineExceeded)

// callContext returns the context that bounds one call on the wire: it
// ends timeout after now, or up to timeout/deadlineSteps later (never
// earlier), or at ctx's own deadline when that comes first, and carries
// ctx's values (a tracing hook's span, say). The returned cancel is nil when
// there is nothing to release.
//
// A call shares its deadline with every call of the backend that starts
// within the same step, so a decision pays for no context, timer or channel
// of its own (context.WithTimeout costs four allocations and a timer, about
// a microsecond, on every decision). The price: once a call is on the wire,
// the request's cancellation no longer ends it early, only its deadline
// and the Timeout do; the script runs in Redis all the same, and its answer
// keeps the deny cache right. A request whose context has already ended, or
// whose deadline comes before the shared one, gets a context of its own, as
// before.
func (b *backend) callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	d, ok := b.bounds.Load(timeout)
	if !ok {
		d, _ = b.bounds.LoadOrStore(timeout, &deadlines{timeout: timeout, step: max(timeout/deadlineSteps, time.Microsecond)})
	}
	bound, end := d.(*deadlines).at(time.Now())
	if ctx.Err() != nil {
		return context.WithTimeoutCause(ctx, timeout, errTimedOut)
	}
	if own, ok := ctx.Deadline(); ok && own.Before(end) {
		return context.WithTimeoutCause(ctx, timeout, errTimedOut)
	}
	return &callCtx{Context: ctx, bound: bound}, nil
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

// ErrSaturated is wrapped by the error of a decision that this process could
// not send to Redis in time, although Redis is not failing: every
// connection was busy and too many decisions were already waiting, or its
// call waited on the wire past the Timeout behind this process's other
// calls while Redis answered those in time, or this process read Redis's
// reply late. It never opens the circuit breaker. It is refused under every
// [FailPolicy]: only Redis grants while Redis is healthy, because time
// spent waiting in this process is no evidence that the limit has room
// (its call may even have run and been counted in Redis). A gin route
// answers it 503, as [FailClosed] answers a Redis failure, and observers
// see [OutcomeSaturated]. A saturated process sheds that request's work
// instead of taking on more.
var ErrSaturated = errors.New("ginlimit: no decision in time: the process is saturated (Redis is not failing)")

// ErrClientGone is wrapped by the error of a decision that was not taken
// because the request's own context ended first: the client hung up, or
// the server's deadline for the request passed. It is neither saturation
// nor a Redis failure: no fallback decides it, the breaker does not count
// it, and the request is never admitted. A gin route aborts it with status
// 499 (Client Closed Request, as nginx logs it), no body and no rate limit
// headers, and its handler does not run; [Policy.Allow] returns it with a
// refused decision. Nothing it carried is lost: the ban strikes it would
// have reported go back, to be reported with the key's next call. If its
// call had already reached Redis, Redis counted it, as for any request
// that Redis admitted.
var ErrClientGone = errors.New("ginlimit: no decision: the request's context ended before Redis answered")

// run sends one script call to the node that serves keys[0] (every key of a
// call is in one slot) and returns the reply.
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
// not a failing Redis, so it is ErrSaturated. It returns the node's breaker,
// nil when there is none. A saturated call (ErrSaturated) is no verdict
// on Redis at all: it neither counts as a failure nor resets the count.
func (b *backend) run(ctx context.Context, queue, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *breaker, error) {
	return b.runOn(ctx, decisionLane, queue, timeout, s, keys, args)
}

// runLease is run for a lease's renewal or release (inflight.go): it waits
// for the node's lease slots, never behind the decisions queued for its
// other slots, and goes to Redis directly, never behind the
// auto-pipeliner's backlog; so a flood of decisions on this process cannot
// make a lease it holds lapse while Redis answers. A wait for a lease slot
// is bounded by timeout.
func (b *backend) runLease(ctx context.Context, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *breaker, error) {
	return b.runOn(ctx, leaseLane, timeout, timeout, s, keys, args)
}

// lane is which of a node's capacities a call waits for.
type lane bool

const (
	decisionLane lane = false // decisions, peeks, resets: the node's slots
	leaseLane    lane = true  // lease renewals and releases: its lease slots
)

// runOn is run on lane l.
func (b *backend) runOn(ctx context.Context, l lane, queue, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, *breaker, error) {
	n, err := b.nodes.forKey(ctx, timeout, keys[0])
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
	cctx, cancel := b.callContext(ctx, timeout)
	if cancel != nil {
		defer cancel()
	}
	reply, err := b.send(cctx, l, n, s, keys, args)
	failed, err := n.judge(ctx, answered, err)
	if noVerdict(err) {
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
// enough decisions already wait on Redis, otherwise directly. Lease calls
// never go through the pipeliner, so they never wait behind its backlog.
func (b *backend) send(ctx context.Context, l lane, n *node, s *redis.Script, keys []string, args []any) ([]int64, error) {
	if b.pipe == nil || l != decisionLane {
		return b.runDirect(ctx, n, s, keys, args)
	}
	defer b.calls.Add(-1)
	if b.calls.Add(1) > b.pipeAbove {
		return b.runPipelined(ctx, n, s, keys, args)
	}
	return b.runDirect(ctx, n, s, keys, args)
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
		// connection of the pool busy: ginlimit never has more calls on the
		// wire than the pool has connections, and none of its abandoned
		// calls hold one, so the application's own commands hold them.
		// That is a busy client, not a failing Redis.
		return false, fmt.Errorf("%w: %w", ErrSaturated, err)
	case (errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)) && n.stranded.Load() == 0:
		// go-redis found no free connection (its PoolTimeout ran out, or
		// MaxActiveConns was reached), and none of ginlimit's abandoned
		// calls holds one: a busy client, not a failing Redis.
		return false, fmt.Errorf("%w: %w", ErrSaturated, err)
	}
	return unavailable(err), err
}

// noVerdict reports whether err says nothing about Redis: the process was
// saturated, or the request's own context ended.
func noVerdict(err error) bool {
	return errors.Is(err, ErrSaturated) || errors.Is(err, ErrClientGone)
}

// mayHaveRun marks an ErrSaturated or ErrClientGone whose call was handed to go-redis, so
// the script may have run in Redis: an in-flight acquire must then be
// released all the same.
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
// that, through its clone that does (b.bound, on the same pool). On other
// clients, and on a
// *redis.ClusterClient (which can block on loading the cluster's slots
// whatever the context says), the call runs in a goroutine and is abandoned
// when ctx ends: the request is answered on time, and the goroutine ends at
// the client's own ReadTimeout. At most the client's pool size of such
// goroutines can wait on a hung server, because waiting for a pooled
// connection does honour ctx.
func (b *backend) runDirect(ctx context.Context, n *node, s *redis.Script, keys []string, args []any) ([]int64, error) {
	return n.call(ctx, func() ([]int64, error) {
		switch {
		case b.honours && !b.nodes.isCluster():
			return ints(s.Run(ctx, b.client, keys, args...))
		case b.bound != nil:
			return ints(s.Run(ctx, b.bound, keys, args...))
		}
		return boundedCounting(ctx, &n.stranded, func() ([]int64, error) { return ints(s.Run(ctx, b.client, keys, args...)) })
	})
}

// ownClone returns a clone of c (the same pools) for ginlimit's calls. It
// bounds socket reads by the call's deadline (ContextTimeoutEnabled), so a
// call needs no goroutine. And go-redis does not retry its calls
// (MaxRetries 0): its retry loop repeats a refused dial or a broken
// connection up to 3 times, with backoff, and each repeat dials again, so a
// Redis that refuses connections held every call until the Timeout.
// node.call retries instead, once, and only what is worth it. A clone has
// none of c's hooks (go-redis's WithTimeout does not copy them), so a
// client with ContextTimeoutEnabled is called as it is, hooks and retries
// included, except by the auto-pipeliner.
func ownClone(c *redis.Client) *redis.Client {
	own := c.WithTimeout(c.Options().ReadTimeout)
	opt := own.Options()
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 0 // the options are normalised already: 0 is none
	return own
}

// ints returns the integers of a script's reply (see lua.Ints).
func ints(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return lua.Ints(v)
}

// boundedGrace is how long bounded waits, once ctx has ended, for f to
// return: go-redis ends a wait for a pooled connection with the context, so
// such a call returns its own context error at once, while a call on the
// wire of a client that ignores the context does not return. "At once" is
// its goroutine being scheduled: 1 ms is too little on a loaded machine
// (under two busy loops and the race detector, with four BLPOPs of the
// application holding a Ring's pool of 4, 16 decisions gave 24 Redis
// failures), and a call that only waited for a connection the
// application held was then taken for one Redis left unanswered (a
// failure, and a stranded call making its siblings' pool waits failures
// too). 20 ms is a heuristic, not a proof: go-redis does not say whether a
// call has its connection. It applies only to a ClusterClient or Ring
// without ContextTimeoutEnabled.
const boundedGrace = 20 * time.Millisecond

// runPipelined submits the script's EVALSHA to the auto-pipeliner and waits
// for it no longer than ctx. The pipeliner runs commands on its own context,
// so WaitContext is what bounds the wait; a command abandoned that way still
// executes. On NOSCRIPT (after SCRIPT FLUSH or a restart) the script is run
// once through the plain client (or its clone), whose EVAL loads it again. Like runDirect,
// it fails fast when n's server is gone (node.call).
func (b *backend) runPipelined(ctx context.Context, n *node, s *redis.Script, keys []string, args []any) ([]int64, error) {
	return n.call(ctx, func() ([]int64, error) { return b.pipelined(ctx, s, keys, args) })
}

// pipelined is one call of runPipelined.
func (b *backend) pipelined(ctx context.Context, s *redis.Script, keys []string, args []any) ([]int64, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	err := b.pipe.Submit(ctx, cmd).WaitContext(ctx)
	if err == nil {
		return ints(cmd)
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		if b.bound != nil {
			return ints(s.Run(ctx, b.bound, keys, args...))
		}
		return ints(s.Run(ctx, b.client, keys, args...))
	}
	if ctx.Err() != nil {
		return nil, cause(ctx)
	}
	return nil, err
}

// honoursContext reports whether client bounds its socket reads by the
// context deadline. go-redis does so only with ContextTimeoutEnabled; by
// default a read waits for the client's ReadTimeout (3 s), whatever the
// context says.
func honoursContext(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// pipelineOptions configures ginlimit's auto-pipeliner: go-redis's
// full-duplex engine, one held connection with a writer and a reader
// goroutine, so calls stream to Redis while earlier replies are read,
// instead of waiting for a batch's round trip. Measured with bench/ on this
// project's 2-core machine, with 32 concurrent callers it makes 1.54× the
// decisions/s of redis_rate, where half-duplex batches (two at a time,
// unordered) made 1.22×; at 256 and 1,024 callers both are 1.8–2.2×.
// Ordering costs nothing here: decisions are independent.
func pipelineOptions() *redis.AutoPipelineOptions {
	o := redis.DefaultAutoPipelineOptions()
	o.FullDuplex = true
	return o
}

// pipelineDepth is how many auto-pipelined calls a backend lets share one
// connection of the pool.
const pipelineDepth = 64

// poolSize is the size of the client's connection pool per node: how many
// calls it can have on the wire at once without making one wait for a
// connection. For a client ginlimit does not know, go-redis's default.
func poolSize(client redis.Scripter) int {
	n, active := 0, 0
	switch c := client.(type) {
	case *redis.Client:
		n, active = c.Options().PoolSize, c.Options().MaxActiveConns
	case *redis.ClusterClient:
		n, active = c.Options().PoolSize, c.Options().MaxActiveConns
	case *redis.Ring:
		n, active = c.Options().PoolSize, c.Options().MaxActiveConns
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0)
	}
	if active > 0 && active < n {
		n = active // go-redis refuses a connection beyond MaxActiveConns
	}
	return n
}

// pipelineAbove is how many decisions of one backend must already be
// waiting on Redis before the next one is auto-pipelined. A lone decision
// gains nothing from a pipeline and pays the hand-off to the pipeliner's
// goroutine, so light traffic takes the direct path and only concurrent
// traffic is batched.
const pipelineAbove = 2

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
	// count never dips below zero (which run would read as stranded calls).
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

// The clients ginlimit is built for; each is a redis.Scripter.
var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
	_ redis.Scripter = (*redis.Ring)(nil)
	_ redis.Scripter = (redis.UniversalClient)(nil)
)
