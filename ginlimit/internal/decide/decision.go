package decide

import (
	"errors"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// Decision is the outcome of one rate limit decision. The middleware stores
// it in the gin context, where handlers read it with DecisionFrom.
type Decision struct {
	// Rule is the name of the rule that decided (see Name).
	Rule string
	// Allowed reports whether the request was admitted.
	Allowed bool
	// The flags are kept together, so that a Decision has no padding
	// between them.
	//
	// Local reports that Redis failed and the in-process fallback of
	// [FailLocal] decided; Err holds the Redis error.
	Local bool
	// Shadow reports that shadow mode (see Shadow) let the request
	// through although the rule, or the failure policy, would have refused
	// it. Allowed still says what the rule decided.
	Shadow bool
	// Cached reports that the rejection came from the in-process deny cache
	// (see DenyCache) without a Redis call.
	Cached bool
	// Banned reports that the request was refused because its identity is
	// banned on the rule (see Ban); RetryAfter and Reset are the time the
	// ban has left, and the 429 carries the ban's message.
	Banned bool
	// Source says where Limit and Window come from: [SourceConfig] (0), the
	// rule's options, or an override set with Policy.SetLimit:
	// [SourceOverride] for the rule's, [SourcePlanOverride] for its plan's
	// (LimitBy), [SourceIdentityOverride] for the identity's. It is a
	// small integer, not a string, to keep a Decision small: every request
	// carries one.
	Source Source
	// Limit is the rule's limit per window; for an in-flight rule
	// (InFlight), its n. An override set with Policy.SetLimit replaces
	// the configured limit: Source says which one applied.
	Limit int
	// Window is the rule's window as it applied, its Window or an
	// override's; 0 for an in-flight rule.
	Window time.Duration
	// Remaining is how many more requests the window admits now, after this
	// one; for an in-flight rule, how many slots are free.
	Remaining int
	// Reset is the time until more quota becomes available: until the
	// oldest request in the window leaves it (sliding log), the oldest
	// counted sub-window leaves (sliding counter), the window ends (fixed
	// window) or the next whole token accrues (token bucket). An in-flight
	// rule cannot know when a slot frees: 0 when it admitted the request,
	// [InFlightRetryAfter] when it refused it.
	Reset time.Duration
	// RetryAfter is how long a rejected request should wait before trying
	// again; it is zero when the request was allowed.
	RetryAfter time.Duration
	// Time is the Redis server's clock when the decision was made.
	Time time.Time
	// Message is what the default 429 body says: the message of the rule
	// that decided (Message; its Ban's for a banned identity), or
	// Reason. A Respond function writes it in a body of its own, as
	// ginlimit/problem does in its detail. It is set on the decisions of
	// requests, not on those of Policy.Peek and Policy.Allow.
	Message string
	// Reason is set when a request was rejected for a reason other than the
	// rate: today, a cost larger than the rule can ever admit. Such a
	// request gets a 429 whose message is Reason, without rate limit
	// headers.
	Reason string
	// Rules holds the decision of every rule of a route declared with
	// Rules; the Decision itself is then the rule that fired (with the
	// longest RetryAfter of the rules that rejected) or, when admitted, the
	// rule with the least remaining. It is nil for a single rule, and when
	// only the rule that refused is known: a rejection from the deny cache
	// or from the FailLocal fallback. On a route with rate and in-flight
	// rules, the decision is the rate rules' when every in-flight rule
	// gave the request a slot, and otherwise the in-flight rules' (whose
	// Rules, when there are several, holds theirs).
	Rules []Decision
	// brk is the breaker that served the decision's call (per master on a
	// cluster, per shard on a Ring), for observers; nil if none did.
	brk *engine.Breaker
	// decider is the rule that decided, a Ban's for a banned identity:
	// its name, header texts and 429 body.
	decider *rule.Base
	// Err is non-nil when Redis could not decide. Allowed then follows the
	// rule's FailPolicy; with FailOpen and FailClosed, Remaining, Reset,
	// RetryAfter and Time are zero, and with FailLocal they come from the
	// in-process fallback (Local is set).
	Err error
}

// Source says where a decision's Limit and Window come from (see
// [Decision.Source]).
type Source uint8

// The values of [Decision.Source], from the least specific: an identity's
// override comes before its plan's, which comes before the rule's, which
// comes before the configuration.
const (
	// SourceConfig: the rule's limit and window are those of its options.
	SourceConfig Source = iota
	// SourceOverride: an override of the rule, set with Policy.SetLimit
	// for a Target that names no plan and no identity.
	SourceOverride
	// SourcePlanOverride: an override of the plan (LimitBy) the request
	// resolved to, set for a Target that names the plan.
	SourcePlanOverride
	// SourceIdentityOverride: an override of the identity, set for a
	// Target that names it, whatever its plan.
	SourceIdentityOverride
)

// Outcome classifies a decision for metrics and logs: the value of
// [Event.Outcome]. Every decision has exactly one.
type Outcome string

// The outcomes of a decision; ginlimit documents each.
const (
	// OutcomeAllowed: admitted.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeLimited: refused with 429.
	OutcomeLimited = "limited"
	// OutcomeShadowLimited: let through by shadow mode.
	OutcomeShadowLimited = "shadow_limited"
	// OutcomeError: Redis could not decide; the failure policy did.
	OutcomeError = "error"
	// OutcomeSaturated: this process could not reach a healthy Redis in time.
	OutcomeSaturated = "saturated"
	// OutcomeFallback: FailLocal's in-process limiter decided.
	OutcomeFallback = "fallback"
	// OutcomeBanned: refused because the identity is banned.
	OutcomeBanned = "banned"
	// OutcomeClientGone: the request's own context ended first.
	OutcomeClientGone = "client_gone"
	// OutcomeReset: not a decision, a reset.
	OutcomeReset = "reset"
	// OutcomeUnauthorized: not a decision, a 401.
	OutcomeUnauthorized = "unauthorized"
)

// outcomeOf returns the outcome of d.
func outcomeOf(d Decision) Outcome {
	switch {
	case errors.Is(d.Err, engine.ErrClientGone):
		return OutcomeClientGone
	case errors.Is(d.Err, engine.ErrSaturated):
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

// Event is one decision, as a function given to Observe sees it. Its
// fields never carry the identity (IP or user id), so metrics built on
// them stay bounded: Route and Rule come from the route templates and rule
// names of the application. An operator's tool that must show who is
// refused reads it with RuleInfo.Refused, as the keys hold it.
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
	// Policy.Reset; "" otherwise.
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
	// RuleInfo.Refused reads the identity from (RefusedKey).
	key string
}

// FailPolicy says what a route does when Redis cannot decide; ginlimit
// documents each policy.
type FailPolicy string

// The failure policies.
const (
	FailLocal  FailPolicy = "FailLocal"
	FailOpen   FailPolicy = "FailOpen"
	FailClosed FailPolicy = "FailClosed"
)

// HeaderStyle says which rate limit headers a route sends; ginlimit
// documents each style.
type HeaderStyle string

// The header styles.
const (
	HeadersBoth   HeaderStyle = "HeadersBoth"
	HeadersIETF   HeaderStyle = "HeadersIETF"
	HeadersLegacy HeaderStyle = "HeadersLegacy"
	HeadersNone   HeaderStyle = "HeadersNone"
)

func (h HeaderStyle) ietf() bool { return h == HeadersBoth || h == HeadersIETF }

func (h HeaderStyle) legacy() bool { return h == HeadersBoth || h == HeadersLegacy }

type decisionKey struct{}

// From returns the decision the route that ran last on c's request stored
// in its gin context, and whether there was one.
func From(c *gin.Context) (Decision, bool) {
	v, ok := c.Get(decisionKey{})
	if !ok {
		return Decision{}, false
	}
	d, ok := v.(*Decision)
	if !ok || d == nil {
		return Decision{}, false
	}
	return *d, true
}

// RefusedKey is, for a refusal, the key of the rule that refused: what
// ginlimit's RuleInfo.Refused reads the identity from; "" otherwise.
func RefusedKey(e Event) string { return e.key }

// ErrBadLimit is wrapped by the error of an override that does not
// compile, or is over its quota (ginlimit.ErrBadLimit).
var ErrBadLimit = errors.New("ginlimit: bad limit")

// InFlightRetryAfter is the Retry-After of a request refused by an
// in-flight rule (ginlimit.InFlightRetryAfter).
const InFlightRetryAfter = time.Second
