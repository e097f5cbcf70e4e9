package ginlimit

import (
	"fmt"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// FailPolicy says what a route does when Redis cannot decide (an error or a
// timeout).
//
// A process that cannot get a decision to a healthy Redis in time
// ([ErrSaturated]) is not a Redis failure: it never opens the breaker, no
// policy applies, and the request is refused with 503 (only Redis grants
// while Redis is healthy).
type FailPolicy = decide.FailPolicy

const (
	// FailLocal, the default, decides with an in-process limiter of the same
	// rules while Redis is failing: a token bucket per key refilling its
	// share, limit/n per window, where n is how many instances share the
	// Redis ([InstancesKey], or [LocalInstances]). The share is never rounded
	// up, so a share below one request admits nothing. It continues from what
	// Redis last said, never from a full budget: from this instance's part of
	// the remaining Redis last reported for the key, refilling only from the
	// reset it reported; a ban Redis reported holds. Its decisions have Local
	// set; it keeps about DefaultLocalKeys keys per rule. An instance that has
	// never heard from Redis spends nothing: its FailLocal routes answer as
	// FailClosed does until Redis answers it once. docs/operations.md ("The
	// failure policies") gives the bounds it keeps.
	FailLocal FailPolicy = decide.FailLocal
	// FailOpen allows the request and logs the error: a rate limiter outage
	// lets every request through, which an attacker who can slow Redis
	// down can use. Choose it only where the limit protects nothing.
	FailOpen FailPolicy = decide.FailOpen
	// FailClosed answers 503 with a JSON body: a rate limiter outage becomes
	// a service outage.
	FailClosed FailPolicy = decide.FailClosed
)

// OnFailure sets what happens when Redis cannot decide. The default is
// [FailLocal].
func OnFailure(p FailPolicy) Option {
	return routeOption(func(r *routeConfig) error {
		if p != FailLocal && p != FailOpen && p != FailClosed {
			return fmt.Errorf("OnFailure(%q): want FailLocal, FailOpen or FailClosed", string(p))
		}
		r.onFail = p
		return nil
	})
}

// DefaultLocalKeys is how many keys the in-process fallback of [FailLocal]
// remembers per rule.
const DefaultLocalKeys = rule.LocalKeys

// LocalInstances tells the [FailLocal] fallback how many application
// instances share the route's rules: while Redis is down, each instance
// admits limit/n per window on its own, so together they stay near the
// limit (nothing, when limit < n: see [FailLocal]). It must be
// from 1 to 1e6. Given on a Limiter made by [New], it applies once the
// heartbeat has answered (see [FailLocal]). Without it, n is the count of the
// instances that announce themselves in [InstancesKey] (see
// [HeartbeatPeriod]), 1 until a heartbeat has answered; given, on a route
// or on the limiter, it overrides that count (the route's wins).
func LocalInstances(n int) Option {
	return routeOption(func(r *routeConfig) error {
		if n < 1 || n > 1e6 {
			return fmt.Errorf("LocalInstances(%d): want 1 to 1e6", n)
		}
		r.localInstances = n
		return nil
	})
}
