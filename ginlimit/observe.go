package ginlimit

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
)

// Outcome classifies a decision for metrics and logs: the value of
// [Event.Outcome]. Every decision has exactly one.
type Outcome string

// The outcomes of a decision.
const (
	// OutcomeAllowed: Redis (or the deny cache) admitted the request.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeLimited: the request was refused with 429.
	OutcomeLimited = "limited"
	// OutcomeShadowLimited: shadow mode let through a request that would
	// have been refused.
	OutcomeShadowLimited = "shadow_limited"
	// OutcomeError: Redis could not decide; FailOpen or FailClosed applied,
	// or FailLocal on an instance that has not heard from Redis yet, which
	// answers as FailClosed does.
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
	// OutcomeUnauthorized is not a decision either: a rule that counts per
	// [User] found no valid identity, and the request was answered 401
	// before anything was counted. Its Event has Reason; its Decision has
	// only Rule. Observers that count decisions should count these apart.
	OutcomeUnauthorized = "unauthorized"
)

// outcomeOf returns the outcome of d.
func outcomeOf(d Decision) Outcome {
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

// Event is one decision, as a function given to [Observe] sees it. Its
// fields never carry the identity (IP or user id), so metrics built on
// them stay bounded: Route and Rule come from the route templates and rule
// names of the application. An operator's tool that must show who is
// refused reads it with [RuleInfo.Refused], as the keys hold it.
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
	Outcome Outcome
	// Decision is the decision itself.
	Decision Decision
	// Latency is how long the decision took, Redis included.
	Latency time.Duration
	// By is, for OutcomeReset, who asked for the reset, as given to
	// [Policy.Reset]; "" otherwise.
	By string
	// Breaker is the state of the circuit breaker that served the
	// decision (the backend's, per master on a cluster, per shard on a
	// Ring) after it: "closed", "open" or "half-open" ("" when it is off,
	// and for OutcomeReset and OutcomeUnauthorized).
	Breaker string
	// Reason is, for OutcomeUnauthorized, why the request had no valid
	// identity: one of the few identity.Reason constants (such as
	// identity.ReasonExpired), never anything of the token or the
	// identity; "" otherwise.
	Reason string
	// key is, for a refusal, the key of the rule that refused: what
	// RuleInfo.Refused reads the identity from (registry.go).
	key string
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

// unauthorized tells p's observers that rule r found no valid identity
// for the request of c (err wraps identity.ErrUnauthenticated), and logs
// it at debug level: at most one line per reason per logEvery on the
// route, so that a wrong secret, which fails every request, shows without
// flooding the log. The line and the Event carry the reason, never err's
// text, which a User of the application's own may fill with the identity.
func (p *Policy) unauthorized(c *gin.Context, r *rule.Base, err error) {
	ctx := c.Request.Context()
	reason := identity.Reason(err)
	if p.debugEnabled(ctx) {
		t, _ := p.authLogs.LoadOrStore(reason, &logThrottle{})
		t.(*logThrottle).log(ctx, p.log(), slog.LevelDebug, "ginlimit: no valid identity for the request; answering 401",
			slog.String("rule", r.Name), slog.String("route", c.FullPath()), slog.String("reason", reason))
	}
	if len(p.observers) == 0 {
		return
	}
	e := Event{Route: rule.RequestScope(c).Label(), Rule: r.Name, Outcome: OutcomeUnauthorized, Decision: Decision{Rule: r.Name}, Reason: reason}
	for _, o := range p.observers {
		o(ctx, e)
	}
}

// observe tells p's observers about req's decision.
func (p *Policy) observe(ctx context.Context, route string, req *request, latency time.Duration) {
	d := &req.d
	e := Event{Route: route, Rule: d.Rule, Outcome: outcomeOf(*d), Decision: *d, Latency: latency}
	if !d.Allowed {
		e.key = req.keyOf(d.decider)
	}
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
