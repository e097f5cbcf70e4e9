package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
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
var ErrBadTarget = errors.New("ginlimit: bad target")

// maxRouteText bounds Target.Route.
const maxRouteText = 1024

// aim is what a Target names: a rule as the route declares it, the rule
// that keeps the count (the plan the Target names, or the rule itself),
// and the scope and identity of the count.
type aim struct {
	declared rule.Any
	rule     rule.Any
	scope    rule.Scope
	who      rule.Who
}

// target resolves t to the rule that keeps its count and the keys Reset
// clears: that rule's (its Ban's, then its own), then those of the other
// plans of the rule declared and of that rule itself.
func (p *Policy) target(t Target) (rule.Any, []string, error) {
	a, err := p.aim(t)
	if err != nil {
		return nil, nil, err
	}
	rate, ok := a.rule.(*rule.Rate)
	if !ok {
		return a.rule, []string{rule.BuildKey(a.rule.Core(), p.route.Named, a.scope, &a.who)}, nil
	}
	keys := p.rateKeys(rate, a.scope, &a.who)
	declared := a.declared.(*rule.Rate)
	for _, x := range append([]*rule.Rate{declared}, slices.Collect(maps.Values(declared.Plans))...) {
		if x != rate {
			keys = append(keys, p.rateKeys(x, a.scope, &a.who)...)
		}
	}
	return rate, keys, nil
}

// zsetKeys is, for each sliding-log rule of t's count (its declared rule
// and plans), the key under which the version before kept that count
// (zsetKey): the log's script honours a count there, so Reset deletes it
// too. t has been checked by target.
func (p *Policy) zsetKeys(t Target) []string {
	a, err := p.aim(t)
	declared, ok := a.declared.(*rule.Rate)
	if err != nil || !ok {
		return nil
	}
	var keys []string
	for _, x := range append([]*rule.Rate{declared}, slices.Collect(maps.Values(declared.Plans))...) {
		if x.Alg.Name() == string(SlidingLog) {
			keys = append(keys, rule.ZsetKey(&x.Base, rule.BuildKey(&x.Base, p.route.Named, a.scope, &a.who)))
		}
	}
	return keys
}

// rateKeys is r's keys for scope s and identity w: its Ban's, then its own.
func (p *Policy) rateKeys(r *rule.Rate, s rule.Scope, w *rule.Who) []string {
	key := rule.BuildKey(&r.Base, p.route.Named, s, w)
	if r.Ban == nil {
		return []string{key}
	}
	return []string{rule.BuildKey(&r.Ban.Base, p.route.Named, s, w), key}
}

// aim resolves t to what it names, or to an ErrBadTarget error.
func (p *Policy) aim(t Target) (aim, error) {
	r, err := p.targetRule(t)
	if err != nil {
		return aim{}, err
	}
	a := aim{declared: r, rule: r}
	if r.Core().Shared && t.Route == "" && t.Key == "" {
		// Any route names a Shared rule's count: none is needed.
		a.scope = rule.Scope{Method: rule.UnmatchedMethod, Route: rule.SharedRoute}
	} else if a.scope, err = targetScope(t); err != nil {
		return aim{}, err
	}
	if rate, ok := r.(*rule.Rate); ok && t.Plan != "" {
		pr := rate.Plans[t.Plan]
		if pr == nil {
			return aim{}, badTarget("rule %q has no plan %q", rate.Name, t.Plan)
		}
		a.rule = pr
	}
	if a.scope.Method != "" { // a gin route: the rule's identity
		if err := a.rule.Core().TargetWho(&a.who, t.forRule()); err != nil {
			return aim{}, fmt.Errorf("%w: rule %q: %w", ErrBadTarget, a.rule.Core().Name, err)
		}
	}
	return a, nil
}

// badTarget is an ErrBadTarget error saying what is wrong.
func badTarget(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadTarget, fmt.Sprintf(format, args...))
}

// targetRule is the rule of p that t names, or its only rule when t names
// none.
func (p *Policy) targetRule(t Target) (r rule.Any, err error) {
	switch {
	case t.Rule == "" && len(p.route.All) == 1:
		r = p.route.All[0]
	case t.Rule == "":
		return nil, badTarget("the route has rules %s: give Target.Rule", p.route.Names())
	default:
		for _, x := range p.route.All {
			if x.Core().Name == t.Rule {
				r = x
			}
		}
		if r == nil {
			return nil, badTarget("no rule named %q (the route has %s)", t.Rule, p.route.Names())
		}
	}
	return r, nil
}

// targetScope is the scope t names: a Policy.Allow key, the unmatched
// routes or a gin route, checking that t names exactly one of them.
func targetScope(t Target) (rule.Scope, error) {
	var s rule.Scope
	switch {
	case t.Route != "" && t.Key != "":
		return rule.Scope{}, badTarget("give Target.Route (a gin route) or Target.Key (Policy.Allow), not both")
	case t.Key != "":
		if t.User != "" || t.IP.IsValid() || len(t.Values) > 0 {
			return rule.Scope{}, badTarget("Target.Key is the whole identity of Policy.Allow: leave User, IP and Values empty")
		}
		s = rule.Scope{Route: t.Key}
	case t.Route == rule.UnmatchedRoute:
		s = rule.Scope{Method: rule.UnmatchedMethod, Route: rule.UnmatchedRoute}
	default:
		method, path, ok := strings.Cut(t.Route, " ")
		if !ok || method == "" || !strings.HasPrefix(path, "/") || len(t.Route) > maxRouteText ||
			!rule.PrintableASCII(t.Route) || strings.ContainsAny(method, " /") {
			return rule.Scope{}, badTarget("Target.Route %q: want a method, a space and a route template, such as \"GET /api/coupon/claim\", or \"unmatched\"", t.Route)
		}
		s = rule.Scope{Method: method, Route: path}
	}
	return s, nil
}

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
	a, err := p.aim(t)
	if err != nil {
		if !t.namesIdentity() {
			return p.settings(t) // a rule (and plan) whose counts need more
		}
		return Decision{}, err
	}
	if r, ok := a.rule.(*rule.InFlight); ok {
		return p.route.PeekSlots(ctx, r, rule.BuildKey(&r.Base, p.route.Named, a.scope, &a.who))
	}
	return p.route.Peek(ctx, a.rule.(*rule.Rate), a.scope, &a.who)
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
	target, keys, err := p.target(t)
	if err != nil {
		return err
	}
	keys = append(keys, p.zsetKeys(t)...)
	r := target.Core()
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

// forRule is the identity t names, as the rule package reads it.
func (t Target) forRule() rule.Target {
	return rule.Target{User: t.User, IP: t.IP, Values: t.Values, Sealed: t.sealed}
}
