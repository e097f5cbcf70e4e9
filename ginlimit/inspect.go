package ginlimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// Target names one count that a [Policy] keeps, for [Policy.Peek] and
// [Policy.Reset]: which rule, on which route (or [Policy.Allow] key), and
// whose. The caller says which rule and whom; the Redis key is built
// exactly as a request's would be, escaping, hashing ([HashIdentities]) and
// IPv6 bucketing included, so no caller writes a key by hand.
//
// Give Route for a Policy that serves gin routes, or Key for one used
// through Allow; then a value for each dimension the rule counts per ([Per],
// [Per]): User for [User] (or, with [UserOrIP], IP for an anonymous
// caller), IP for [IP], Values for the others; nothing for a rule that
// counts the whole route. A value the rule does not count per is an error,
// not ignored.
type Target struct {
	// Route is the route as gin and [Event.Route] name it: the method, one
	// space and the route template as registered, "GET /api/coupon/claim"
	// (not a request's path: "/api/users/:id", not "/api/users/7"), or
	// "unmatched" for the requests that matched no route. For a [Shared]
	// rule, whose count is the group's, it may be empty, and any route
	// names the same count. For [Policy.SetLimit] and [Policy.Peek] of a
	// rule's (or plan's) own settings, "Policy.Allow" names every key given
	// to [Policy.Allow].
	Route string
	// Key is the key given to [Policy.Allow], for a
	// Policy used outside gin. A rule's Type plays no part there: the key
	// is the whole identity.
	Key string
	// Rule is the [Name] of the rule on a route declared with [Rule]s. On a
	// route with one rule it may be empty.
	Rule string
	// User is the user id a Per(User) rule counts, as the UserIdentity
	// returns it.
	User string
	// IP is the client address a Per(IP) rule counts; an IPv6 address
	// stands for its bucket (see identity.IP.Bucket).
	IP netip.Addr
	// Values holds the value of each [ByParam], [ByHeader] and [ByFunc]
	// dimension the rule counts per, by the name the dimension was given:
	// {"id": "7"} for ByParam("id").
	Values map[string]string
	// Plan is, on a rule with [LimitBy], the plan
	// whose count Peek reads; empty for the rule's own limit. Reset clears
	// the identity's count in every plan.
	Plan string
	// sealed is the identity as a rule with HashIdentities keeps it,
	// "<labels>:<hex>", from RuleInfo.Target: the one way to name such a
	// count without the identity (registry.go).
	sealed string
}

// ErrBadTarget is wrapped by the error of a [Target] that names no count of
// the policy: an unknown rule or plan, a missing or extra identity, a
// malformed route. The error says what is wrong without repeating the
// identity.
var ErrBadTarget = rule.ErrBadTarget

// Peek returns what a request on t's count would be told now, without
// counting anything: Allowed (for a request of the rule's [Cost]), Limit,
// Remaining, Reset and, when not allowed, RetryAfter. It always asks Redis
// (never the deny cache), through the route's breaker and Timeout, and has
// no fallback: when Redis cannot answer, it returns the error, wrapped.
// For an [InFlight] rule, Limit is its n and Remaining the slots free.
//
// [Decision.Window] and [Decision.Source] give the settings in force, an
// override's ([Policy.SetLimit]) or the configuration's. A Target that
// names a rule (and plan) and its route, and no identity, on a rule whose
// counts need one, asks for those alone: Peek calls no Redis and fills
// Rule, Limit, Window and Source only.
func (p *Policy) Peek(ctx context.Context, t Target) (Decision, error) {
	p.route.Fleet.Touch()
	a, err := rule.AimAt(p.route.All, t.forRule())
	if err != nil {
		if !t.namesIdentity() {
			return p.settings(t) // a rule (and plan) whose counts need more
		}
		return Decision{}, err
	}
	if r, ok := a.Rule.(*rule.InFlight); ok {
		return p.route.PeekSlots(ctx, r, rule.BuildKey(&r.Base, p.route.Named, a.Scope, &a.Who))
	}
	return p.route.Peek(ctx, a.Rule.(*rule.Rate), a.Scope, &a.Who)
}

// Reset clears t's count: every algorithm's key for the rule and the
// identity (in every plan of a rule with [LimitBy]) is deleted, so the next
// request starts afresh. by says who asked, as observers see it
// ([Event.By]) and the log says it: a short, low-cardinality name such as
// "admin-api" or "support", never a user id, since it becomes a metric
// label. It is cut to 64 bytes.
//
// Every instance drops what it holds in process for the count (its deny
// cache and its [FailLocal] buckets) before Reset returns: it tells them
// on [ResetChannel] and waits for each to acknowledge, for at most the
// route's staleness bound ([DefaultMaxStaleness]), after which each is coherent with Redis anyway. So
// a request sent to any instance after Reset returns is decided on the
// fresh count. Reset returns Redis's error, wrapped, when the keys could
// not be deleted.
func (p *Policy) Reset(ctx context.Context, t Target, by string) error {
	a, err := rule.AimAt(p.route.All, t.forRule())
	if err != nil {
		return err
	}
	keys := append(a.Keys(p.route.Named), a.ZsetKeys(p.route.Named)...)
	r := a.Rule.Core()
	by = boundLabel(by)
	start := time.Now()
	announced, err := p.route.Fleet.Reset(ctx, p.route.Queue, p.route.Timeout, keys, p.route.Staleness)
	if err != nil {
		return fmt.Errorf("ginlimit: Reset: rule %q: %w", r.Name, err)
	}
	route := t.Route
	if t.Key != "" {
		route = ""
	}
	if announced != nil {
		// The count is reset; an instance that did not hear of it in time
		// is coherent by the staleness bound now.
		p.route.Logs.Log(ctx, p.route.Logger, slog.LevelWarn, "ginlimit: reset not acknowledged by every instance in time",
			slog.String("route", route), slog.String("rule", r.Name), slog.String("by", by), decide.ErrAttr(announced))
	}
	p.route.Log().LogAttrs(ctx, slog.LevelInfo, "ginlimit: reset",
		slog.String("route", route), slog.String("rule", r.Name), slog.String("by", by))
	if len(p.route.Observers) > 0 {
		e := Event{Route: route, Rule: r.Name, Outcome: OutcomeReset, By: by,
			Decision: Decision{Rule: r.Name, Limit: r.Limit, Remaining: r.Limit, Time: start},
			Latency:  time.Since(start)}
		for _, o := range p.route.Observers {
			o(ctx, e)
		}
	}
	return nil
}

// boundLabel returns s cut to 64 bytes of printable ASCII, for a metric
// label: other bytes become '_'.
func boundLabel(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	if rule.PrintableASCII(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '_'
		}
	}
	return string(b)
}

// forRule is t as the rule package reads it.
func (t Target) forRule() rule.Target {
	return rule.Target{Route: t.Route, Key: t.Key, Rule: t.Rule, Plan: t.Plan, User: t.User, IP: t.IP, Values: t.Values, Sealed: t.sealed}
}

// target resolves t to the rule that keeps its count and the keys Reset
// clears (rule.Aim.Keys).
func (p *Policy) target(t Target) (rule.Any, []string, error) {
	a, err := rule.AimAt(p.route.All, t.forRule())
	if err != nil {
		return nil, nil, err
	}
	return a.Rule, a.Keys(p.route.Named), nil
}
