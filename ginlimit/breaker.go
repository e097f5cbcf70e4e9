package ginlimit

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrCircuitOpen is wrapped by the error of a decision that was not sent to
// Redis because the backend's circuit breaker is open (see [Breaker]).
var ErrCircuitOpen = errors.New("ginlimit: circuit breaker open: Redis is failing")

// Defaults of the circuit breaker.
const (
	// DefaultBreakerFailures is how many consecutive Redis failures open the
	// breaker when no [Breaker] is given.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpen is how long the breaker stays open before it lets
	// one probe through, when no [Breaker] is given.
	DefaultBreakerOpen = 500 * time.Millisecond
)

// Breaker sets the circuit breaker of the route's Redis backend: after failures consecutive Redis
// failures (errors or timeouts) it stops calling Redis for open, answering
// every decision at once under the failure policy, so a dead Redis does not
// add a timeout's worth of latency to every request. Then it lets a single
// probe through: success closes it, failure opens it again for open. A
// failure counts only when the request itself was still waiting, and only
// when it means Redis could not serve (a network error, a timeout, LOADING,
// BUSY, MASTERDOWN, CLUSTERDOWN, READONLY, TRYAGAIN); a reply error such as
// WRONGTYPE on one key does not open the breaker for the others. The
// default is DefaultBreakerFailures and DefaultBreakerOpen; Breaker(0, 0)
// turns it off. failures must be from 1 to math.MaxInt32, and open from
// 1ns to an hour. The breaker belongs to the backend, which the routes of a
// [Limiter] on one client share: a Redis outage opens it once for all of
// them. On a *redis.ClusterClient each master has its own breaker, and on
// a *redis.Ring each shard, so a dead master or shard fails fast only for
// the keys it owns. A saturated call ([ErrSaturated]) is no verdict: it
// neither counts as a failure nor resets the count.
func Breaker(failures int, open time.Duration) Option {
	return routeOption(func(r *routeConfig) error {
		switch {
		case failures == 0 && open == 0:
		case failures < 1 || failures > math.MaxInt32 || open <= 0 || open > time.Hour:
			return fmt.Errorf("Breaker(%d, %v): want 1 <= failures <= %d and 0 < open <= 1h, or Breaker(0, 0) for none", failures, open, math.MaxInt32)
		}
		r.breakFailures, r.breakOpen = failures, open
		return nil
	})
}

// breaker is a consecutive-failure circuit breaker. It is safe for
// concurrent use and takes no lock.
type breaker struct {
	threshold int32
	open      int64 // ns
	base      time.Time

	failures  atomic.Int32
	openUntil atomic.Int64 // ns since base; 0 when closed
	probing   atomic.Bool
}

// newBreaker returns a breaker, or nil for failures <= 0 (none).
func newBreaker(failures int, open time.Duration) *breaker {
	if failures <= 0 {
		return nil
	}
	return &breaker{threshold: int32(failures), open: int64(open), base: time.Now()}
}

func (b *breaker) now() int64 { return int64(time.Since(b.base)) }

// allow reports whether a call may go to Redis, and whether it is the
// half-open probe (which must be followed by done).
func (b *breaker) allow() (ok, probe bool) {
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
func (b *breaker) done(probe, failed bool) {
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
func (b *breaker) abandon() {
	if b != nil {
		b.probing.Store(false)
	}
}

// state returns "closed", "open" or "half-open", or "" for no breaker.
func (b *breaker) state() string {
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

// unavailable reports whether err means Redis could not serve, as opposed to
// a reply error from a healthy server (WRONGTYPE on one bad key, say), which
// must not open the breaker for every other key of the rule.
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
