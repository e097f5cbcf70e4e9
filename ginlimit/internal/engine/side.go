package engine

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Side runs s outside the decisions' path: no slot, no breaker, no
// auto-pipeliner, for a call that keeps state beside the decisions (the
// overrides' poll). Like a decision it is bounded by ctx whatever the
// client: on the client itself when it honours ctx, on the engine's clone
// that does, or else abandoned when ctx ends, the call running on until
// the client's ReadTimeout. It returns the reply as go-redis gives it.
func (e *Engine) Side(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	switch {
	case e.honours && !e.nodes.isCluster():
		return s.Run(ctx, e.client, keys, args...).Result()
	case e.bound != nil:
		return s.Run(ctx, e.bound, keys, args...).Result()
	}
	return bounded(ctx, func() (any, error) { return s.Run(ctx, e.client, keys, args...).Result() })
}
