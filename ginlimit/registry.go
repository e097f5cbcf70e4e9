package ginlimit

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// RuleInfo is one rule of one route as a [Limiter] compiled it, read-only:
// what an operator's tool shows and steers (ginlimit/console). Its Policy
// is the handle to steer it with ([Policy.SetLimit], [Policy.Peek],
// [Policy.Reset]), given this Route and Rule in a [Target].
//
// Limit, Window and Source are the settings in force on this instance
// when [Limiter.Rules] was called: the configuration's, or an override's.
// The others are the configuration's.
type RuleInfo struct {
	// Policy is the compiled route the rule belongs to.
	Policy *Policy
	// Route is the route, as [Target.Route] names it ("GET /api/x"), on
	// which the rule has served a request; "" until it has. A Policy given
	// to several routes (a group's Use) has one RuleInfo per route.
	// gin tells a handler its route at a request, not when it is
	// registered, so a tool lists the application's routes from
	// gin.Engine.Routes besides.
	Route string
	// Rule is the rule's [Name].
	Rule string
	// Algorithm is the rule's [Algorithm]; "" for an [InFlight] rule.
	Algorithm AlgorithmKind
	// Limit, Window and Source are the limit and window in force and where
	// they come from (see [Decision.Source]); Window is 0 for an in-flight
	// rule, whose Limit is its n.
	Limit  int
	Window time.Duration
	Source Source
	// ConfigLimit and ConfigWindow are the rule's own [Limit] and [Window].
	ConfigLimit  int
	ConfigWindow time.Duration
	// Per names the dimensions the rule counts per, as its keys label them
	// ("user", "ip", "p.id", ...): none for the whole route.
	Per []string
	// Shared reports a [Shared] rule: one count for every route of its
	// group.
	Shared bool
	// Plans holds the limit of each plan of a rule with [LimitBy].
	Plans map[string]int
	// BanAfter, BanWithin and BanFor are the rule's [Ban]; BanAfter is 0
	// without one.
	BanAfter  int
	BanWithin time.Duration
	BanFor    time.Duration
	// Lease is an [InFlight] rule's lease; 0 for a rate rule.
	Lease time.Duration
	// OnFailure is the route's failure policy ([OnFailure]).
	OnFailure FailPolicy
	// Hashed reports that the rule's keys hold a keyed hash of each
	// identity ([HashIdentities]) instead of the identity.
	Hashed bool
	// Breakers is the state of each circuit breaker of the route's Redis
	// backend ("closed", "open", "half-open"), by Redis address ("" for the
	// client as a whole); nil when breakers are off.
	Breakers map[string]string
}

// Rules returns every rule of every route compiled with l.RateLimit, in
// the order compiled, one entry per route it has served (see
// RuleInfo.Route). It reads what l holds in process and calls no Redis.
func (l *Limiter) Rules() []RuleInfo {
	l.registry.mu.Lock()
	policies := slices.Clone(l.registry.policies)
	l.registry.mu.Unlock()
	var out []RuleInfo
	for _, p := range policies {
		routes := p.route.Seen.Routes()
		if len(routes) == 0 {
			routes = []string{""}
		}
		breakers := p.route.Engine.BreakerStates()
		for _, route := range routes {
			for _, r := range p.route.All {
				ri := ruleInfo(p, r, route)
				ri.Breakers = breakers
				out = append(out, ri)
			}
		}
	}
	return out
}

// On returns the rule described on route, a route of its Policy that this
// instance has not served (Limiter.Rules lists only those it has: gin
// tells a Policy its route at a request) but a tool learned it serves,
// from another instance. Limit, Window and Source are those in force on
// route. A route that is not "<METHOD> <template>" wraps [ErrBadTarget].
// It calls no Redis.
func (ri RuleInfo) On(route string) (RuleInfo, error) {
	if ri.Policy == nil {
		return ri, rule.BadTarget("no policy")
	}
	if _, err := rule.ParseScope(rule.Target{Route: route}); err != nil || route == rule.UnmatchedRoute {
		return ri, cmp.Or(err, rule.BadTarget("Target.Route %q: want a gin route", route))
	}
	for _, r := range ri.Policy.route.All {
		if r.Core().Name == ri.Rule {
			out := ruleInfo(ri.Policy, r, route)
			out.Breakers = ri.Breakers
			return out, nil
		}
	}
	return ri, rule.BadTarget("rule %q is not one of its policy's", ri.Rule)
}

// Identity returns the identity of t's count as the rule's keys hold it:
// "user:alice", "ip:192.0.2.1", "p.id:7" (several joined by spaces), a
// keyed hash with [HashIdentities] ("user:<32 hex digits>"), escaped as in
// a key; "" for a rule that counts the whole route. It is what
// RuleInfo.Refused returns for a request of that identity, so a tool can
// find an identity the operator types among the refused ones. It calls no
// Redis; a Target that names no count of the rule wraps [ErrBadTarget].
func (ri RuleInfo) Identity(t Target) (string, error) {
	if ri.Policy == nil {
		return "", rule.BadTarget("no policy")
	}
	t.Rule = ri.Rule
	if t.Route == "" && t.Key == "" {
		t.Route = ri.Route
	}
	a, err := rule.AimAt(ri.Policy.route.All, t.forRule())
	if err != nil {
		return "", err
	}
	return keyIdentity(rule.BuildKey(a.Rule.Core(), ri.Policy.route.Named, a.Scope, &a.Who)), nil
}

// Refused returns the identity of e's request, as Identity names it, when
// e is a refusal of this rule that counts per some dimension (Outcome
// [OutcomeLimited], [OutcomeBanned] or [OutcomeShadowLimited]); "" and
// false otherwise. It is for an operator's tool, which keeps it bounded:
// unlike the rest of an Event, an identity must never become a metric
// label or a log attribute.
func (ri RuleInfo) Refused(e Event) (string, bool) {
	key := decide.RefusedKey(e)
	if key == "" || e.Rule != ri.Rule {
		return "", false
	}
	id := keyIdentity(key)
	return id, id != ""
}

// keyIdentity returns the dimensions' part of a key that buildKey made:
// what follows the scope ("<METHOD> <route>", or "* shared"), inside the
// hash tag for a route with one rule, after " rule:<name>" otherwise; ""
// for a key without one. Neither the scope nor the name holds a space
// (both are escaped), so it follows the second space.
func keyIdentity(key string) string {
	open := strings.IndexByte(key, '{')
	end := strings.IndexByte(key, '}')
	if open < 0 || end < open {
		return ""
	}
	rest := key[open+1 : end] // a route with one rule: "<scope> <dims>"
	if end < len(key)-1 {
		rest = key[end+1:] // " rule:<name> <dims>"
	}
	_, after, ok := strings.Cut(rest, " ")
	if !ok {
		return ""
	}
	_, id, _ := strings.Cut(after, " ")
	return id
}

// ruleInfo describes r on route.
func ruleInfo(p *Policy, r rule.Any, route string) RuleInfo {
	b := r.Core()
	ri := RuleInfo{Policy: p, Route: route, Rule: b.Name, Limit: b.Limit, ConfigLimit: b.Limit,
		Shared: b.Shared, OnFailure: p.route.OnFail, Hashed: b.HashKey != nil}
	for _, d := range b.Dims {
		ri.Per = append(ri.Per, d.Label)
	}
	switch x := r.(type) {
	case *rule.InFlight:
		ri.Lease = x.Lease
	case *rule.Rate:
		ri.Algorithm, ri.Window, ri.ConfigWindow = AlgorithmKind(x.Alg.Name()), x.Window, x.Window
		ri.Plans, ri.Source = x.Cfg.Plans, SourceConfig
		if bn := x.Cfg.Ban; bn != nil {
			ri.BanAfter, ri.BanWithin, ri.BanFor = bn.After, bn.Within, bn.Duration
		}
		if d, err := p.settings(Target{Route: route, Rule: b.Name}); err == nil {
			ri.Limit, ri.Window, ri.Source = d.Limit, d.Window, d.Source
		}
	}
	return ri
}

// registry is what a Limiter compiled for routes, for Limiter.Rules.
type registry struct {
	mu       sync.Mutex
	policies []*Policy
}

// add notes p, compiled for a route.
func (g *registry) add(p *Policy) {
	g.mu.Lock()
	g.policies = append(g.policies, p)
	g.mu.Unlock()
}

// Target returns the Target of the count that Identity or Refused names
// identity on this rule and route, for Policy.Peek, Reset and SetLimit.
// With [HashIdentities] it is the one way to name an identity's count
// without the identity: the Target holds the hash, which no other field
// can. An identity that is not in that form, or not of this rule, wraps
// [ErrBadTarget].
func (ri RuleInfo) Target(identity string) (Target, error) {
	t := Target{Route: ri.Route, Rule: ri.Rule}
	if ri.Hashed {
		t.sealed = identity
		return t, nil
	}
	for _, f := range strings.Fields(identity) {
		label, value, ok := strings.Cut(f, ":")
		if !ok || value == "" || strings.HasPrefix(value, "%~") {
			return t, rule.BadTarget("not an identity of the rule: <label>:<value> for each dimension")
		}
		value = fleet.Unescape(value)
		switch {
		case label == "user" && t.User == "":
			t.User = value
		case (label == "ip" || label == "anon") && !t.IP.IsValid():
			ip, err := netip.ParseAddr(value)
			if err != nil {
				return t, rule.BadTarget("not an IP address")
			}
			t.IP = ip
		case len(label) > 2 && label[1] == '.' && strings.IndexByte("phf", label[0]) >= 0:
			if t.Values == nil {
				t.Values = map[string]string{}
			}
			t.Values[label[2:]] = value
		default:
			return t, rule.BadTarget("a label is not one of the rule's dimensions, or comes twice")
		}
	}
	return t, nil
}

// namesIdentity reports whether t names an identity's count (or a
// Policy.Allow key), not a rule's or plan's settings alone.
func (t Target) namesIdentity() bool {
	return t.Key != "" || t.User != "" || t.IP.IsValid() || len(t.Values) > 0 || t.sealed != ""
}
