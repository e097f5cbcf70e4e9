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
)

// Target names one count that a [Policy] keeps, for [Policy.Peek] and
// [Policy.Reset]: which rule, on which route (or [Policy.Allow] key), and
// whose. The caller says which rule and whom; the Redis key is built
// exactly as a request's would be, escaping, hashing ([HashIdentities]) and
// IPv6 bucketing included, so no caller writes a key by hand.
//
// Give Route for a Policy that serves gin routes, or Key for one used
// through Allow; then a value for each dimension the rule counts per ([Per],
// [Type]): User for [User] (or, with [UserOrIP], IP for an anonymous
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
	// User is the user id a Type(User) rule counts, as the UserIdentity
	// returns it.
	User string
	// IP is the client address a Type(IP) rule counts; an IPv6 address
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
	declared anyRule
	rule     anyRule
	scope    scope
	who      who
}

// target resolves t to the rule that keeps its count and the keys Reset
// clears: that rule's (its Ban's, then its own), then those of the other
// plans of the rule declared and of that rule itself.
func (p *Policy) target(t Target) (anyRule, []string, error) {
	a, err := p.aim(t)
	if err != nil {
		return nil, nil, err
	}
	rate, ok := a.rule.(*rateRule)
	if !ok {
		return a.rule, []string{buildKey(a.rule.base(), p.named, a.scope, &a.who)}, nil
	}
	keys := p.rateKeys(rate, a.scope, &a.who)
	declared := a.declared.(*rateRule)
	for _, x := range append([]*rateRule{declared}, slices.Collect(maps.Values(declared.plans))...) {
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
	declared, ok := a.declared.(*rateRule)
	if err != nil || !ok {
		return nil
	}
	var keys []string
	for _, x := range append([]*rateRule{declared}, slices.Collect(maps.Values(declared.plans))...) {
		if x.alg == SlidingLog {
			keys = append(keys, zsetKey(&x.ruleBase, buildKey(&x.ruleBase, p.named, a.scope, &a.who)))
		}
	}
	return keys
}

// rateKeys is r's keys for scope s and identity w: its Ban's, then its own.
func (p *Policy) rateKeys(r *rateRule, s scope, w *who) []string {
	key := buildKey(&r.ruleBase, p.named, s, w)
	if r.ban == nil {
		return []string{key}
	}
	return []string{buildKey(&r.ban.ruleBase, p.named, s, w), key}
}

// aim resolves t to what it names, or to an ErrBadTarget error.
func (p *Policy) aim(t Target) (aim, error) {
	r, err := p.targetRule(t)
	if err != nil {
		return aim{}, err
	}
	a := aim{declared: r, rule: r}
	if r.base().shared && t.Route == "" && t.Key == "" {
		// Any route names a Shared rule's count: none is needed.
		a.scope = scope{method: unmatchedMethod, route: sharedRoute}
	} else if a.scope, err = targetScope(t); err != nil {
		return aim{}, err
	}
	if rate, ok := r.(*rateRule); ok && t.Plan != "" {
		pr := rate.plans[t.Plan]
		if pr == nil {
			return aim{}, badTarget("rule %q has no plan %q", rate.name, t.Plan)
		}
		a.rule = pr
	}
	if a.scope.method != "" { // a gin route: the rule's identity
		if err := a.rule.base().targetWho(&a.who, t); err != nil {
			return aim{}, fmt.Errorf("%w: rule %q: %w", ErrBadTarget, a.rule.base().name, err)
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
func (p *Policy) targetRule(t Target) (r anyRule, err error) {
	switch {
	case t.Rule == "" && len(p.all) == 1:
		r = p.all[0]
	case t.Rule == "":
		return nil, badTarget("the route has rules %s: give Target.Rule", p.names())
	default:
		for _, x := range p.all {
			if x.base().name == t.Rule {
				r = x
			}
		}
		if r == nil {
			return nil, badTarget("no rule named %q (the route has %s)", t.Rule, p.names())
		}
	}
	return r, nil
}

// targetScope is the scope t names: a Policy.Allow key, the unmatched
// routes or a gin route, checking that t names exactly one of them.
func targetScope(t Target) (scope, error) {
	var s scope
	switch {
	case t.Route != "" && t.Key != "":
		return scope{}, badTarget("give Target.Route (a gin route) or Target.Key (Policy.Allow), not both")
	case t.Key != "":
		if t.User != "" || t.IP.IsValid() || len(t.Values) > 0 {
			return scope{}, badTarget("Target.Key is the whole identity of Policy.Allow: leave User, IP and Values empty")
		}
		s = scope{route: t.Key}
	case t.Route == unmatchedRoute:
		s = scope{method: unmatchedMethod, route: unmatchedRoute}
	default:
		method, path, ok := strings.Cut(t.Route, " ")
		if !ok || method == "" || !strings.HasPrefix(path, "/") || len(t.Route) > maxRouteText ||
			!printableASCII(t.Route) || strings.ContainsAny(method, " /") {
			return scope{}, badTarget("Target.Route %q: want a method, a space and a route template, such as \"GET /api/coupon/claim\", or \"unmatched\"", t.Route)
		}
		s = scope{method: method, route: path}
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
	p.fleet.Touch()
	a, err := p.aim(t)
	if err != nil {
		if !t.namesIdentity() {
			return p.settings(t) // a rule (and plan) whose counts need more
		}
		return Decision{}, err
	}
	if r, ok := a.rule.(*slotRule); ok {
		return p.peekSlots(ctx, r, buildKey(&r.ruleBase, p.named, a.scope, &a.who))
	}
	r := a.rule.(*rateRule)
	req := &request{scope: a.scope}
	req.alloc([]*rateRule{r}, r.records())
	p.setCall(req, 0, r, &a.who, max(r.cost, 1))
	reply, _, err := p.engine.Run(ctx, p.queue, p.timeout, peekScript, req.keys, p.severalArgs(req))
	if err != nil {
		return Decision{}, fmt.Errorf("ginlimit: Peek: rule %q: %w", r.name, err)
	}
	d, _, err := p.parseFor(req, reply, false)
	if err != nil {
		return Decision{}, fmt.Errorf("ginlimit: Peek: rule %q: %w", r.name, err)
	}
	return d, nil
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
	r := target.base()
	by = boundLabel(by)
	start := time.Now()
	announced, err := p.fleet.Reset(ctx, p.queue, p.timeout, keys, p.staleness)
	if err != nil {
		return fmt.Errorf("ginlimit: Reset: rule %q: %w", r.name, err)
	}
	route := t.Route
	if t.Key != "" {
		route = ""
	}
	if announced != nil {
		// The count is reset; an instance that did not hear of it in time
		// is coherent by the staleness bound now.
		p.logs.log(ctx, p.logger, slog.LevelWarn, "ginlimit: reset not acknowledged by every instance in time",
			slog.String("route", route), slog.String("rule", r.name), slog.String("by", by), errAttr(announced))
	}
	p.log().LogAttrs(ctx, slog.LevelInfo, "ginlimit: reset",
		slog.String("route", route), slog.String("rule", r.name), slog.String("by", by))
	if len(p.observers) > 0 {
		e := Event{Route: route, Rule: r.name, Outcome: OutcomeReset, By: by,
			Decision: Decision{Rule: r.name, Limit: r.limit, Remaining: r.limit, Time: start},
			Latency:  time.Since(start)}
		for _, o := range p.observers {
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
	if printableASCII(s) {
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
