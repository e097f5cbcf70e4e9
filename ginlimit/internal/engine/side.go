package engine

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Side runs s outside the decisions' path, for a call that keeps state
// beside the decisions (the overrides' poll): it takes one of the node's
// slots, as a decision does, so that the engine never has more calls on
// the wire than the pool has connections (judge relies on it), but it
// passes no verdict on Redis (the breaker is neither asked nor told) and
// never goes through the auto-pipeliner. It waits for the slot, and for
// Redis, at most timeout in all, whatever the client: on the client itself
// when it honours ctx, on the engine's clone that does, or else abandoned
// when ctx ends, the call running on until the client's ReadTimeout. It
// returns the reply as go-redis gives it.
func (e *Engine) Side(ctx context.Context, timeout time.Duration, s *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := e.nodes.forKey(ctx, timeout, keys[0])
	if err != nil {
		return nil, err
	}
	if err := n.acquire(ctx, decisionLane, timeout); err != nil {
		return nil, err
	}
	defer n.release(decisionLane)
	var v any
	switch {
	case e.honours && !e.nodes.isCluster():
		v, err = s.Run(ctx, e.client, keys, args...).Result()
	case e.bound != nil:
		v, err = s.Run(ctx, e.bound, keys, args...).Result()
	default:
		v, err = bounded(ctx, func() (any, error) { return s.Run(ctx, e.client, keys, args...).Result() })
	}
	if err == nil {
		n.answered.Add(1)
	}
	return v, err
}

// RunAside is [Engine.Run] for a call that keeps state beside the
// decisions (the overrides' poll): it takes a slot and is bounded as a
// decision is, but it passes no verdict on Redis: the breaker is not told,
// and a call that fails is only its caller's concern. While the node's
// breaker is open it makes no call (ErrCircuitOpen): Redis is failing, and
// the decisions do not ask it either. While decisions wait on Redis
// through the auto-pipeliner, it joins them there, on the pipeliner's own
// connection, rather than take a connection of the pool that a decision
// waits for (judge would take that decision's wait for a Redis failure);
// otherwise it goes directly, as a lone decision does. A call Redis
// answers counts as answered (see judge).
func (e *Engine) RunAside(ctx context.Context, timeout time.Duration, s *redis.Script, keys []string, args []any) ([]int64, error) {
	n, err := e.nodes.forKey(ctx, timeout, keys[0])
	if err != nil {
		return nil, err
	}
	if n.brk.State() == "open" {
		return nil, ErrCircuitOpen
	}
	if err := n.acquire(ctx, decisionLane, timeout); err != nil {
		return nil, err
	}
	defer n.release(decisionLane)
	w := &wire{start: time.Now()}
	cctx, cancel := e.callContext(ctx, timeout, w)
	if cancel != nil {
		defer cancel()
	}
	var reply []int64
	if e.pipe != nil && e.calls.Load() > 0 {
		reply, err = e.runPipelined(cctx, n, w, s, keys, args)
	} else {
		reply, err = e.runDirect(cctx, n, w, s, keys, args)
	}
	if err == nil {
		n.answered.Add(1)
	}
	return reply, err
}
