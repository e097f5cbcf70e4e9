package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend is the Redis call path of one client: it knows the scripts, the
// circuit breakers, auto-pipelining and how a call is bounded in time, and
// nothing about HTTP or policy. A [Limiter] keeps one per client (and per
// breaker and pipelining setting), which every route on it shares. It is
// safe for concurrent use.
type backend struct {
	client    redis.Scripter
	honours   bool                 // the client bounds reads by the context deadline
	pipe      *redis.AutoPipeliner // nil without AutoPipeline or on other clients
	pipeAbove int64                // pipelineAbove; tests lower it
	calls     atomic.Int64         // calls now waiting on Redis, when pipelining
	brk       *breakers            // nil when off
}

// backendKey tells the backends of a limiter apart.
type backendKey struct {
	client        redis.Scripter
	breakFailures int
	breakOpen     time.Duration
	autoPipeline  bool
}

// shareable reports whether k can be a map key: a client of a type that is
// not comparable gets a backend of its own on every route.
func (k backendKey) shareable() bool {
	return reflect.TypeOf(k.client).Comparable()
}

// newBackend returns the backend of k's client and loads every script on it.
func newBackend(k backendKey) (*backend, error) {
	b := &backend{
		client:    k.client,
		honours:   honoursContext(k.client),
		pipeAbove: pipelineAbove,
		brk:       newBreakers(k.client, k.breakFailures, k.breakOpen),
	}
	if k.autoPipeline {
		// Only a plain client: go-redis's cluster auto-pipeliner shares
		// batches across masters, so one dead master would stall the
		// others, and Ring does not auto-pipeline at all.
		if c, ok := k.client.(*redis.Client); ok {
			var err error
			if b.pipe, err = c.AsyncAutoPipelineWithOptions(pipelineOptions()); err != nil {
				return nil, fmt.Errorf("AutoPipeline(true): %w", err)
			}
		}
	}
	b.load()
	return b, nil
}

// load loads every script now, best effort, so that the first burst of
// decisions does not meet NOSCRIPT and send each script twice. Run handles
// NOSCRIPT anyway, so a failure here costs nothing, and a dead Redis delays
// start-up by DefaultTimeout at most.
func (b *backend) load() {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	_, _ = bounded(ctx, func() (struct{}, error) {
		for _, s := range append(singleScripts[:], severalScript) {
			if err := s.Load(ctx, b.client).Err(); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
}

// script returns the script that decides rules of the given algorithms
// together: an algorithm's own single-rule script, the fast path, for one
// rule, and the several-rule script otherwise. Both take the same
// arguments and give the same reply.
func (b *backend) script(algs []AlgorithmKind) *redis.Script {
	if len(algs) == 1 {
		return singleScripts[algs[0]]
	}
	return severalScript
}

// errTimedOut is the cause of a decision's context when its Timeout ran
// out, as opposed to the request's own context ending.
var errTimedOut = fmt.Errorf("Redis did not answer within the Timeout: %w", context.DeadlineExceeded)

// withTimeout bounds a decision by d inside ctx.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, errTimedOut)
}

// run sends one script call through the circuit breaker of the node that
// serves keys[0] (every key of a call is in one slot) and returns the reply
// no later than ctx ends. It returns the breaker, nil when there is none,
// and ErrCircuitOpen, wrapped, when the breaker is open. A failure counts
// against the breaker only when it means Redis could not serve and the
// request itself was still waiting: a request whose own context ended says
// nothing about Redis.
func (b *backend) run(ctx context.Context, s *redis.Script, keys []string, args []any) ([]any, *breaker, error) {
	var brk *breaker
	probe := false
	if b.brk != nil {
		brk = b.brk.forKey(ctx, keys[0])
		var ok bool
		if ok, probe = brk.allow(); !ok {
			return nil, brk, ErrCircuitOpen
		}
	}
	var reply []any
	var err error
	if b.pipe != nil && b.calls.Add(1) > b.pipeAbove {
		reply, err = b.runPipelined(ctx, s, keys, args)
		b.calls.Add(-1)
	} else {
		if b.pipe != nil {
			defer b.calls.Add(-1)
		}
		reply, err = b.runDirect(ctx, s, keys, args)
	}
	if brk != nil {
		callerGone := ctx.Err() != nil && !errors.Is(context.Cause(ctx), errTimedOut)
		brk.done(probe, err != nil && !callerGone && unavailable(err))
	}
	return reply, brk, err
}

// runDirect runs s and returns no later than ctx is done. On a client that
// honours the context this is a plain call. On one that does not, the call
// runs in a goroutine and is abandoned when ctx ends: the request is answered
// on time, and the goroutine ends at the client's own ReadTimeout. At most
// the client's pool size of such goroutines can wait on a hung server,
// because waiting for a pooled connection does honour ctx.
func (b *backend) runDirect(ctx context.Context, s *redis.Script, keys []string, args []any) ([]any, error) {
	if b.honours {
		return s.Run(ctx, b.client, keys, args...).Slice()
	}
	return bounded(ctx, func() ([]any, error) { return s.Run(ctx, b.client, keys, args...).Slice() })
}

// runPipelined submits the script's EVALSHA to the auto-pipeliner and waits
// for it no longer than ctx. The pipeliner runs commands on its own context,
// so WaitContext is what bounds the wait; a command abandoned that way still
// executes. On NOSCRIPT (after SCRIPT FLUSH or a restart) the script is run
// once through the plain client, whose EVAL loads it again.
func (b *backend) runPipelined(ctx context.Context, s *redis.Script, keys []string, args []any) ([]any, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	err := b.pipe.Submit(ctx, cmd).WaitContext(ctx)
	if err == nil {
		return cmd.Slice()
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return s.Run(ctx, b.client, keys, args...).Slice()
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
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

// pipelineOptions configures ginlimit's auto-pipeliner. Decisions are
// independent of each other, so command order does not matter, and letting
// two batches overlap keeps Redis busy while the client reads the previous
// batch's replies.
func pipelineOptions() *redis.AutoPipelineOptions {
	o := redis.DefaultAutoPipelineOptions()
	o.MaxConcurrentBatches = 2
	o.Unordered = true
	return o
}

// pipelineAbove is how many decisions of one backend must already be
// waiting on Redis before the next one is auto-pipelined. A lone decision
// gains nothing from a pipeline and pays the hand-off to the pipeliner's
// goroutine, so light traffic takes the direct path and only concurrent
// traffic is batched.
const pipelineAbove = 2

// bounded runs f in a goroutine and returns its result, or ctx's cause as
// soon as ctx ends.
func bounded[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// The clients ginlimit is built for; each is a redis.Scripter.
var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
	_ redis.Scripter = (*redis.Ring)(nil)
	_ redis.Scripter = (redis.UniversalClient)(nil)
)
