package rule

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// What a Target names: ginlimit's Policy.Peek, Reset and SetLimit, and
// RuleInfo, resolve the public Target to a rule, a scope and an identity
// here, building the keys as a request would.

// ErrBadTarget is wrapped by the error of a Target that names no count
// of the rules (ginlimit.ErrBadTarget).
var ErrBadTarget = errors.New("ginlimit: bad target")

// maxRouteText bounds Target.Route.
const maxRouteText = 1024

// Aim is what a Target names: a rule as the route declares it, the rule
// that keeps the count (the plan the Target names, or the rule itself),
// and the scope and identity of the count.
type Aim struct {
	Declared Any
	Rule     Any
	Scope    Scope
	Who      Who
}

// Keys are the keys of a's count that a reset clears, on a route whose
// keys name their rule when named: the counting rule's (its Ban's, then
// its own), then those of the other plans of the rule declared and of
// that rule itself.
func (a *Aim) Keys(named bool) []string {
	rate, ok := a.Rule.(*Rate)
	if !ok {
		return []string{BuildKey(a.Rule.Core(), named, a.Scope, &a.Who)}
	}
	keys := rate.keys(named, a.Scope, &a.Who)
	declared := a.Declared.(*Rate)
	for _, x := range append([]*Rate{declared}, slices.Collect(maps.Values(declared.Plans))...) {
		if x != rate {
			keys = append(keys, x.keys(named, a.Scope, &a.Who)...)
		}
	}
	return keys
}

// ZsetKeys is, for each sliding-log rule of a's count (its declared rule
// and plans), the key under which the version before kept that count
// (ZsetKey): the log's script honours a count there, so a reset deletes it
// too.
func (a *Aim) ZsetKeys(named bool) []string {
	declared, ok := a.Declared.(*Rate)
	if !ok {
		return nil
	}
	var keys []string
	for _, x := range append([]*Rate{declared}, slices.Collect(maps.Values(declared.Plans))...) {
		if x.Alg.Name() == "sliding_log" {
			keys = append(keys, ZsetKey(&x.Base, BuildKey(&x.Base, named, a.Scope, &a.Who)))
		}
	}
	return keys
}

// keys is r's keys for scope s and identity w: its Ban's, then its own.
func (r *Rate) keys(named bool, s Scope, w *Who) []string {
	key, ban := r.KeyPair(named, s, w)
	if ban == "" {
		return []string{key}
	}
	return []string{ban, key}
}

// AimAt resolves t to what it names among all, a route's rules, or to an
// ErrBadTarget error.
func AimAt(all []Any, t Target) (Aim, error) {
	r, err := Find(all, t)
	if err != nil {
		return Aim{}, err
	}
	a := Aim{Declared: r, Rule: r}
	if r.Core().Shared && t.Route == "" && t.Key == "" {
		// Any route names a Shared rule's count: none is needed.
		a.Scope = Scope{Method: UnmatchedMethod, Route: SharedRoute}
	} else if a.Scope, err = ParseScope(t); err != nil {
		return Aim{}, err
	}
	if rate, ok := r.(*Rate); ok && t.Plan != "" {
		pr := rate.Plans[t.Plan]
		if pr == nil {
			return Aim{}, BadTarget("rule %q has no plan %q", rate.Name, t.Plan)
		}
		a.Rule = pr
	}
	if a.Scope.Method != "" { // a gin route: the rule's identity
		if err := a.Rule.Core().TargetWho(&a.Who, t); err != nil {
			return Aim{}, fmt.Errorf("%w: rule %q: %w", ErrBadTarget, a.Rule.Core().Name, err)
		}
	}
	return a, nil
}

// BadTarget is an ErrBadTarget error saying what is wrong.
func BadTarget(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadTarget, fmt.Sprintf(format, args...))
}

// Find is the rule of all that t names, or its only rule when t names
// none.
func Find(all []Any, t Target) (r Any, err error) {
	switch {
	case t.Rule == "" && len(all) == 1:
		r = all[0]
	case t.Rule == "":
		return nil, BadTarget("the route has rules %s: give Target.Rule", names(all))
	default:
		for _, x := range all {
			if x.Core().Name == t.Rule {
				r = x
			}
		}
		if r == nil {
			return nil, BadTarget("no rule named %q (the route has %s)", t.Rule, names(all))
		}
	}
	return r, nil
}

// ParseScope is the scope t names: a Policy.Allow key, the unmatched
// routes or a gin route, checking that t names exactly one of them.
func ParseScope(t Target) (Scope, error) {
	var s Scope
	switch {
	case t.Route != "" && t.Key != "":
		return Scope{}, BadTarget("give Target.Route (a gin route) or Target.Key (Policy.Allow), not both")
	case t.Key != "":
		if t.User != "" || t.IP.IsValid() || len(t.Values) > 0 {
			return Scope{}, BadTarget("Target.Key is the whole identity of Policy.Allow: leave User, IP and Values empty")
		}
		s = Scope{Route: t.Key}
	case t.Route == UnmatchedRoute:
		s = Scope{Method: UnmatchedMethod, Route: UnmatchedRoute}
	default:
		method, path, ok := strings.Cut(t.Route, " ")
		if !ok || method == "" || !strings.HasPrefix(path, "/") || len(t.Route) > maxRouteText ||
			!PrintableASCII(t.Route) || strings.ContainsAny(method, " /") {
			return Scope{}, BadTarget("Target.Route %q: want a method, a space and a route template, such as \"GET /api/coupon/claim\", or \"unmatched\"", t.Route)
		}
		s = Scope{Method: method, Route: path}
	}
	return s, nil
}

// names is the names of rules, as in the RateLimit-Policy header, joined
// by commas.
func names(rules []Any) string {
	s := make([]string, len(rules))
	for i, r := range rules {
		s[i] = r.Core().Name
	}
	return strings.Join(s, ",")
}

// AllowRoute is the Target.Route that names every call of Policy.Allow
// (Event.Route's name for them).
const AllowRoute = "Policy.Allow"

// FindRate is the rate rule, or plan, that t names without an identity;
// its source is the Source of an override of it.
func FindRate(all []Any, t Target) (*Rate, error) {
	x, err := Find(all, t)
	if err != nil {
		return nil, err
	}
	r, ok := x.(*Rate)
	if !ok {
		return nil, BadTarget("rule %q is an in-flight rule: only a rate rule's limit can be overridden", x.Core().Name)
	}
	if t.Plan == "" {
		return r, nil
	}
	if pr := r.Plans[t.Plan]; pr != nil {
		return pr, nil
	}
	return nil, BadTarget("rule %q has no plan %q", r.Name, t.Plan)
}

// RateScope is the rate rule, or plan, that t names without an
// identity, and the scope its override holds in (overrideScope): t.Route,
// any route of a Shared rule's group, or Policy.Allow's calls (scope{}).
func RateScope(all []Any, t Target) (*Rate, Scope, error) {
	r, err := FindRate(all, t)
	switch {
	case err != nil:
		return nil, Scope{}, err
	case t.Route == AllowRoute:
		return r, Scope{}, nil
	case t.Route == "" && r.Shared:
		return r, Scope{Method: UnmatchedMethod, Route: SharedRoute}, nil
	case t.Route == "":
		return nil, Scope{}, BadTarget("rule %q counts per route: give Target.Route, the route whose limit to change (%q for every key of Policy.Allow)", r.Name, AllowRoute)
	}
	s, err := ParseScope(t)
	if err != nil {
		return nil, Scope{}, err
	}
	return r, s, nil
}
