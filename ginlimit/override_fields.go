package ginlimit

import (
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// The fields of LimitsKey, and the values an operator may edit by hand:
// the fleet of each Limiter and client parses them once per change
// (fleet.NewOverrides) into the index all of its policies share; a field
// or value that does not parse is left out, as one whose rule does not
// compile is. This file writes the fields, as the keys are written.
//
// A rule's or a plan's field names the count's scope as the count's key
// does, so that an override holds exactly where the configured rule
// counts, and on no other route that shares its Key prefix:
//
//	<prefix>{<METHOD> <route>}[ rule:<name>] *   the rule on one gin route
//	<prefix>{* unmatched}[ rule:<name>] *        on the requests that matched no route
//	<prefix>{* shared} rule:<name> *             a [Shared] group, on every route of it
//	<prefix>{* allow}[ rule:<name>] *            every key given to Policy.Allow
//
// The prefix is the rule's Key (a plan's with its "tier=<plan>:"), the
// scope is escaped as in a key, and " rule:<name>" is there when the
// count's key carries the rule's name. No count key ends in " *": an
// identity's values and a rule's name are escaped, spaces included. No
// gin route spells "* allow" (a route begins with '/'), and no Allow key
// holds a space. An identity's field is its count's key past the
// algorithm's tag (see SetLimit).

// allowScope is the scope, in a rule's field, of every call of
// Policy.Allow: no gin route or Allow key spells it.
var allowScope = rule.Scope{Method: rule.UnmatchedMethod, Route: "allow"}

// allowRoute is the Target.Route that names every call of Policy.Allow
// (Event.Route's name for them).
const allowRoute = "Policy.Allow"

// overrideScope is the scope of an override of x, a rule or a plan, that
// holds for calls in scope s on a policy whose keys name their rule
// (named): a Shared rule's group, every key of Policy.Allow, or s.
func overrideScope(x *rule.Rate, named bool, s rule.Scope) fleet.RuleScope {
	switch {
	case s.Method == "":
		s = allowScope
	case x.Shared:
		s, named = rule.Scope{Method: rule.UnmatchedMethod, Route: rule.SharedRoute}, true
	}
	k := fleet.RuleScope{Prefix: x.Cfg.Prefix, Method: s.Method, Route: s.Route}
	if named {
		k.Name = x.EscapedName
	}
	return k
}

// ruleField is k's field in LimitsKey.
func ruleField(k fleet.RuleScope) string {
	f := k.Prefix + "{" + rule.Escape(k.Method, rule.RouteSafe) + " " + rule.Escape(k.Route, rule.RouteSafe) + "}"
	if k.Name != "" {
		f += " rule:" + k.Name
	}
	return f + " *"
}

// isField reports whether f is the field ruleField writes for k, its name
// escaped as in a key (a fleet.Canonical): no key of a rule names another.
func isField(k fleet.RuleScope, f string) bool {
	return rule.Escape(k.Name, rule.IDSafe) == k.Name && ruleField(k) == f
}

// concerns reports whether some override of ov is under a Key prefix of
// p's rate rules or their plans: a policy none concerns has no view.
func (p *Policy) concerns(ov *fleet.Overrides) bool {
	for _, r := range p.rules {
		for _, x := range withPlans(r) {
			if ov.Prefixes[x.Cfg.Prefix] {
				return true
			}
		}
	}
	return false
}
