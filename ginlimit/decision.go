package ginlimit

import (
	"context"
	"errors"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
)

// Decision is the outcome of one rate limit decision. The middleware stores
// it in the gin context, where handlers read it with [DecisionFrom]. Its
// fields are documented where it is defined, in the package that decides
// (ginlimit/internal/decide: `go doc ./ginlimit/internal/decide Decision`):
// Rule, Allowed, Local, Shadow, Cached, Banned, Source, Limit, Window,
// Remaining, Reset, RetryAfter, Time, Message, Reason, Rules and Err. It is
// that type, not a copy, so a request's decision is never converted.
type Decision = decide.Decision

// Source says where a decision's Limit and Window come from (see
// [Decision.Source]).
type Source = decide.Source

// The values of [Decision.Source], from the least specific: an identity's
// override comes before its plan's, which comes before the rule's, which
// comes before the configuration.
const (
	// SourceConfig: the rule's limit and window are those of its options.
	SourceConfig Source = decide.SourceConfig
	// SourceOverride: an override of the rule, set with [Policy.SetLimit]
	// for a [Target] that names no plan and no identity.
	SourceOverride Source = decide.SourceOverride
	// SourcePlanOverride: an override of the plan ([LimitBy]) the request
	// resolved to, set for a Target that names the plan.
	SourcePlanOverride Source = decide.SourcePlanOverride
	// SourceIdentityOverride: an override of the identity, set for a
	// Target that names it, whatever its plan.
	SourceIdentityOverride Source = decide.SourceIdentityOverride
)

// Outcome classifies a decision for metrics and logs: the value of
// [Event.Outcome]. Every decision has exactly one.
type Outcome = decide.Outcome

// The outcomes of a decision.
const (
	// OutcomeAllowed: Redis (or the deny cache) admitted the request.
	OutcomeAllowed Outcome = decide.OutcomeAllowed
	// OutcomeLimited: the request was refused with 429.
	OutcomeLimited = decide.OutcomeLimited
	// OutcomeShadowLimited: shadow mode let through a request that would
	// have been refused.
	OutcomeShadowLimited = decide.OutcomeShadowLimited
	// OutcomeError: Redis could not decide; FailOpen or FailClosed applied,
	// or FailLocal on an instance that has not heard from Redis yet, which
	// answers as FailClosed does.
	OutcomeError = decide.OutcomeError
	// OutcomeSaturated: this process could not get the decision to a
	// healthy Redis in time (see [ErrSaturated]); it was refused with 503.
	OutcomeSaturated = decide.OutcomeSaturated
	// OutcomeFallback: Redis could not decide and FailLocal's in-process
	// limiter did.
	OutcomeFallback = decide.OutcomeFallback
	// OutcomeBanned: the request was refused with 429 because its identity
	// is banned on the rule (see [Ban]).
	OutcomeBanned = decide.OutcomeBanned
	// OutcomeClientGone: the request's own context ended before Redis
	// decided it (see [ErrClientGone]); it was not admitted.
	OutcomeClientGone = decide.OutcomeClientGone
	// OutcomeReset is not a decision: [Policy.Reset] cleared a count of the
	// rule. Its Event has By; its Decision has only Rule, Limit, Remaining
	// (the limit) and Time.
	OutcomeReset = decide.OutcomeReset
	// OutcomeUnauthorized is not a decision either: a rule that counts per
	// [User] found no valid identity, and the request was answered 401
	// before anything was counted. Its Event has Reason; its Decision has
	// only Rule. Observers that count decisions should count these apart.
	OutcomeUnauthorized = decide.OutcomeUnauthorized
)

// Event is one decision, as a function given to [Observe] sees it: Route,
// Rule, Outcome, Decision, Latency, By, Breaker and Reason, documented
// where it is defined (`go doc ./ginlimit/internal/decide Event`). Its
// fields never carry the identity (IP or user id), so metrics built on
// them stay bounded. An operator's tool that must show who is refused
// reads it with [RuleInfo.Refused], as the keys hold it.
type Event = decide.Event

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

// DecisionFrom returns the decision made for the current request by the
// rate limit annotation that ran last on its route, and whether there was
// one. A request answered 401 by a User route has none.
func DecisionFrom(c *gin.Context) (Decision, bool) { return decide.From(c) }
