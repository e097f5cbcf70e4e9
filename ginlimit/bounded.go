package ginlimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

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

// pipelineAbove is how many decisions of one policy must already be waiting
// on Redis before the next one is auto-pipelined. A lone decision gains
// nothing from a pipeline and pays the hand-off to the pipeliner's
// goroutine, so light traffic takes the direct path and only concurrent
// traffic is batched.
const pipelineAbove = 2

// runPipelined submits the script's EVALSHA to the auto-pipeliner and waits
// for it no longer than ctx. The pipeliner runs commands on its own context,
// so WaitContext is what bounds the wait; a command abandoned that way still
// executes. On NOSCRIPT (after SCRIPT FLUSH or a restart) the script is run
// once through the plain client, whose EVAL loads it again.
func runPipelined(ctx context.Context, ap *redis.AutoPipeliner, s *redis.Script, client redis.Scripter, key string, args []any) ([]any, error) {
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", s.Hash(), 1, key}, args...)...)
	err := ap.Submit(ctx, cmd).WaitContext(ctx)
	if err == nil {
		return cmd.Slice()
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return s.Run(ctx, client, []string{key}, args...).Slice()
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return nil, err
}

// runScript runs s and returns no later than ctx is done. On a client that
// honours the context this is a plain call. On one that does not, the call
// runs in a goroutine and is abandoned when ctx ends: the request is answered
// on time, and the goroutine ends at the client's own ReadTimeout. At most
// the client's pool size of such goroutines can wait on a hung server,
// because waiting for a pooled connection does honour ctx.
func runScript(ctx context.Context, honours bool, s *redis.Script, client redis.Scripter, keys []string, args []any) ([]any, error) {
	if honours {
		return s.Run(ctx, client, keys, args...).Slice()
	}
	return bounded(ctx, func() ([]any, error) { return s.Run(ctx, client, keys, args...).Slice() })
}

// bounded runs f in a goroutine and returns its result, or ctx's error as
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
