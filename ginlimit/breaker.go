package ginlimit

import (
	"fmt"
	"math"
	"time"
)

// Defaults of the circuit breaker.
const (
	// DefaultBreakerFailures is how many consecutive Redis failures (errors
	// or timeouts) open the circuit breaker of a Redis backend: it then
	// stops calling Redis for DefaultBreakerOpen, answering every decision
	// at once under the failure policy, so a dead Redis does not add a
	// timeout's worth of latency to every request. Then it lets a single
	// probe through: success closes it, failure opens it again. A failure
	// counts only when it means Redis could not serve (a network error, a
	// timeout, LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, READONLY, TRYAGAIN);
	// a reply error such as WRONGTYPE on one key, or a saturated call
	// ([ErrSaturated]), does not. The routes of a [Limiter] on one client
	// share the breaker; on a *redis.ClusterClient each master has its own,
	// and on a *redis.Ring each shard.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpen is how long the breaker stays open before it lets
	// one probe through.
	DefaultBreakerOpen = 500 * time.Millisecond
)

// withBreaker replaces [DefaultBreakerFailures] and [DefaultBreakerOpen]
// (withBreaker(0, 0) turns the breaker off), so tests can open it on the
// first failure or keep it open. failures must be from 1 to
// math.MaxInt32, and open from 1ns to an hour.
func withBreaker(failures int, open time.Duration) Option {
	return routeOption(func(r *routeConfig) error {
		switch {
		case failures == 0 && open == 0:
		case failures < 1 || failures > math.MaxInt32 || open <= 0 || open > time.Hour:
			return fmt.Errorf("withBreaker(%d, %v): want 1 <= failures <= %d and 0 < open <= 1h, or withBreaker(0, 0) for none", failures, open, math.MaxInt32)
		}
		r.breakFailures, r.breakOpen = failures, open
		return nil
	})
}
