package ginlimit

import (
	"fmt"
	"math"
	"time"
)

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
