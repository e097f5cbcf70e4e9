package engine

import "github.com/redis/go-redis/v9"

// What the engine shows of itself: the breakers, for observers, and the
// few settings end-to-end tests check or turn.

// Breaker returns the breaker of the client as a whole (a plain client's
// only one; a cluster's or a Ring's for what reaches no node), nil when
// breakers are off. Its state is the one to report for a decision that
// made no call (a cached rejection, say).
func (e *Engine) Breaker() *Breaker { return e.nodes.one.brk }

// NodeBreakers returns the breakers of the nodes made so far: one per
// cluster master and per Ring shard in use (none for a plain client,
// whose one node is Breaker's). An entry is nil when breakers are off.
func (e *Engine) NodeBreakers() []*Breaker {
	var out []*Breaker
	add := func(_, v any) bool {
		out = append(out, v.(*node).brk)
		return true
	}
	e.nodes.byAddr.Range(add)
	e.nodes.byShard.Range(add)
	return out
}

// Pipeliner returns the engine's own auto-pipeliner, nil when it has none.
func (e *Engine) Pipeliner() *redis.AutoPipeliner { return e.transport.pipe }

// HonoursContext reports whether the application's client bounds its
// socket reads by a call's context (ContextTimeoutEnabled).
func (e *Engine) HonoursContext() bool { return e.transport.honours }

// SetPipelineAbove sets how many calls must already wait on Redis before
// the next one is auto-pipelined; 0 pipelines every call. Tests lower it
// to drive the pipelined path with a lone call.
func (e *Engine) SetPipelineAbove(n int64) { e.transport.pipeAbove.Store(n) }

// HoldSlots takes every slot of the client's node (a plain client's only
// one) and returns the function that gives them back: until then every
// call waits its queue time and is ErrSaturated, as under a flood that
// holds every slot, whatever the machine's speed. For tests.
func (e *Engine) HoldSlots() (release func()) {
	slots := e.nodes.one.slots
	for range cap(slots) {
		slots <- struct{}{}
	}
	return func() {
		for range cap(slots) {
			<-slots
		}
	}
}

// BreakerStates returns the state of each breaker, by the address of the
// Redis server it guards: the client's as a whole under "" (a plain
// client's address when it has one), then each cluster master's and Ring
// shard's made so far. It is nil when breakers are off.
func (e *Engine) BreakerStates() map[string]string {
	if e.nodes.one.brk == nil {
		return nil
	}
	out := map[string]string{}
	add := func(n *node) {
		addr := ""
		if n.pool != nil {
			addr = n.pool.Options().Addr
		}
		out[addr] = n.brk.State()
	}
	add(e.nodes.one)
	each := func(_, v any) bool {
		add(v.(*node))
		return true
	}
	e.nodes.byAddr.Range(each)
	e.nodes.byShard.Range(each)
	return out
}
