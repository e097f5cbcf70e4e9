package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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
