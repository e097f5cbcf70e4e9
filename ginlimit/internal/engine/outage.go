package engine

import (
	"sync/atomic"
	"time"
)

// Watcher is told when a node's server starts failing and when it answers
// again, so that an outage is logged once, with its cause, and its end is
// logged too, rather than every call's failure on its own. It must be safe
// for concurrent use and must not block: it is called on a call's path.
type Watcher interface {
	// Failing is told the first Redis failure of a node after an answer
	// (or since the engine was made), with its error. It returns whether
	// it reported it: only then is the end of that outage reported. Until
	// it does, it is told each further failure of the outage.
	Failing(cause error) bool
	// Answering is told that a node whose failure Failing reported has
	// answered a call: down is how long since that failure, and failures
	// how many of the node's calls failed meanwhile (refusals of its open
	// breaker not counted).
	Answering(down time.Duration, failures int64)
}

// Watch makes e tell w when a node starts failing and when it answers
// again. Call it before e makes any call, once.
func (e *Engine) Watch(w Watcher) { e.nodes.watch = w }

// health is a node's outage as its Watcher was told it: when the first
// of the failures in a row happened (0 while the server answers), whether
// the Watcher reported it, and how many calls have failed since.
type health struct {
	since    atomic.Int64 // unix ns; 0 while the server answers
	reported atomic.Bool
	failures atomic.Int64
}

// note records a call of the node that is a verdict on its server (not a
// saturated call, a request gone, or a refusal of an open breaker):
// failed, with err, or answered. An answer costs one atomic load while
// the server answers.
func (h *health) note(w Watcher, failed bool, err error) {
	if w == nil {
		return
	}
	if failed {
		h.failures.Add(1)
		if h.since.Load() == 0 && h.since.CompareAndSwap(0, time.Now().UnixNano()) {
			h.reported.Store(w.Failing(err))
		} else if !h.reported.Load() && w.Failing(err) {
			// The Watcher held back this outage's start (a flapping Redis
			// had just been reported): it still lasts, so it is reported
			// now, and its end will be.
			h.reported.Store(true)
		}
		return
	}
	since := h.since.Load()
	if since == 0 || !h.since.CompareAndSwap(since, 0) {
		return
	}
	failures := h.failures.Swap(0)
	if h.reported.Swap(false) {
		w.Answering(time.Since(time.Unix(0, since)), failures)
	}
}
