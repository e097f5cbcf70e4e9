package ginlimit

import (
	"context"
	"errors"
	"time"
)

// The outcomes of a decision, the values of [Event.Outcome], for metrics
// and logs. Every decision has exactly one. They are plain strings, as
// Event.Route and Event.Rule are: an outcome is read and compared, never
// given to ginlimit.
const (
	// OutcomeAllowed: Redis (or the deny cache) admitted the request.
	OutcomeAllowed = "allowed"
	// OutcomeLimited: the request was refused with 429.
	OutcomeLimited = "limited"
	// OutcomeShadowLimited: shadow mode let through a request that would
	// have been refused.
	OutcomeShadowLimited = "shadow_limited"
	// OutcomeError: Redis could not decide; FailOpen or FailClosed applied.
	OutcomeError = "error"
	// OutcomeSaturated: this process could not get the decision to a
	// healthy Redis in time (see [ErrSaturated]); it was refused with 503.
	OutcomeSaturated = "saturated"
	// OutcomeFallback: Redis could not decide and FailLocal's in-process
	// limiter did.
	OutcomeFallback = "fallback"
	// OutcomeBanned: the request was refused with 429 because its identity
	// is banned on the rule (see [Ban]).
	OutcomeBanned = "banned"
	// OutcomeClientGone: the request's own context ended before Redis
	// decided it (see [ErrClientGone]); it was not admitted.
	OutcomeClientGone = "client_gone"
	// OutcomeReset is not a decision: [Policy.Reset] cleared a count of the
	// rule. Its Event has By; its Decision has only Rule, Limit, Remaining
	// (the limit) and Time.
	OutcomeReset = "reset"
)

// outcomeOf returns the outcome of d.
func outcomeOf(d Decision) string {
	switch {
	case errors.Is(d.Err, ErrClientGone):
		return OutcomeClientGone
	case errors.Is(d.Err, ErrSaturated):
		return OutcomeSaturated
	case d.Local:
		return OutcomeFallback
	case d.Err != nil:
		return OutcomeError
	case d.Shadow:
		return OutcomeShadowLimited
	case d.Banned:
		return OutcomeBanned
	case !d.Allowed:
		return OutcomeLimited
	}
	return OutcomeAllowed
}

// Event is one decision, as a function given to [Observe] sees it. It never carries the
// identity (IP or user id), so metrics built on it stay bounded: Route and
// Rule come from the route templates and rule names of the application.
type Event struct {
	// Route is the request's method and route template, e.g.
	// "GET /api/coupon/claim"; "unmatched" for a request that matched no
	// route (so a client cannot make up labels); "" outside gin
	// (Policy.Allow).
	Route string
	// Rule is the rule that decided (see [Decision.Rule]).
	Rule string
	// Outcome classifies the decision: one of the Outcome constants
	// (OutcomeAllowed, ...).
	Outcome string
	// Decision is the decision itself.
	Decision Decision
	// Latency is how long the decision took, Redis included.
	Latency time.Duration
	// By is, for OutcomeReset, who asked for the reset, as given to
	// [Policy.Reset]; "" otherwise.
	By string
	// Breaker is the state of the circuit breaker that served the
	// decision (the backend's, per master on a cluster, per shard on a
	// Ring) after it: "closed", "open" or "half-open" ("" when it is off).
	Breaker string
}

// Observe adds f as an observer of every decision: every admission and
// refusal, every Redis error (Outcome [OutcomeError] or
// [OutcomeFallback], with Decision.Err), and every reset. Observers given
// to the limiter and to a route all see the route's decisions. f is called
// on the request's goroutine once the decision is made (and, for a refused
// request, answered), before the handler runs, so it must be fast and safe
// for concurrent use, and must not panic: as with any handler, a panic
// reaches gin's recovery, and the request gets a 500 instead of its
// handler. The ginlimit/metrics package has a Prometheus collector whose Observe method
// fits: ginlimit.Observe(collector.Observe).
func Observe(f func(ctx context.Context, e Event)) Option {
	return routeOption(func(r *routeConfig) error {
		if f == nil {
			return errors.New("Observe(nil): the function must not be nil")
		}
		r.observers = append(r.observers[:len(r.observers):len(r.observers)], f)
		return nil
	})
}

// observe tells p's observers about d.
func (p *Policy) observe(ctx context.Context, route string, d *Decision, latency time.Duration) {
	e := Event{Route: route, Rule: d.Rule, Outcome: outcomeOf(*d), Decision: *d, Latency: latency}
	switch {
	case d.brk != nil:
		e.Breaker = d.brk.State()
	default:
		e.Breaker = p.engine.Breaker().State()
	}
	for _, o := range p.observers {
		o(ctx, e)
	}
}
