package ginlimit

import (
	"strconv"
	"strings"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// The fields of LimitsKey, and the values an operator may edit by hand:
// each backend of a Limiter parses them once per change into an
// overrides, which all of its policies share; a field or value that does
// not parse is left out, as one whose rule does not compile is.
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

// setting is the limit and window of a stored override (a window of 0:
// the rule's own).
type setting struct {
	limit  int
	window time.Duration
}

// ruleScope is where a rule's or a plan's override holds: the rule's Key
// prefix (a plan's with its tag), the scope unescaped, and the rule's
// name, escaped, when its keys carry it ("" when they do not).
type ruleScope struct {
	prefix, method, route, name string
}

// whoKey is where an identity's override holds: the Key prefix of the
// rule a route declares, and its count key past the algorithm's tag.
type whoKey struct {
	prefix, rest string
}

// allowScope is the scope, in a rule's field, of every call of
// Policy.Allow: no gin route or Allow key spells it.
var allowScope = rule.Scope{Method: rule.UnmatchedMethod, Route: "allow"}

// allowRoute is the Target.Route that names every call of Policy.Allow
// (Event.Route's name for them).
const allowRoute = "Policy.Allow"

// overrideScope is the scope of an override of x, a rule or a plan, that
// holds for calls in scope s on a policy whose keys name their rule
// (named): a Shared rule's group, every key of Policy.Allow, or s.
func overrideScope(x *rule.Rate, named bool, s rule.Scope) ruleScope {
	switch {
	case s.Method == "":
		s = allowScope
	case x.Shared:
		s, named = rule.Scope{Method: rule.UnmatchedMethod, Route: rule.SharedRoute}, true
	}
	k := ruleScope{prefix: x.Cfg.Prefix, method: s.Method, route: s.Route}
	if named {
		k.name = x.EscapedName
	}
	return k
}

// field is k's field in LimitsKey.
func (k ruleScope) field() string {
	f := k.prefix + "{" + rule.Escape(k.method, rule.RouteSafe) + " " + rule.Escape(k.route, rule.RouteSafe) + "}"
	if k.name != "" {
		f += " rule:" + k.name
	}
	return f + " *"
}

// parseRuleField is the scope of a rule's or a plan's field f; ok is
// false when f is not one, or not as field writes it.
func parseRuleField(f string) (k ruleScope, ok bool) {
	rest, ok := strings.CutSuffix(f, " *")
	i := strings.IndexByte(rest, '{')
	j := strings.IndexByte(rest, '}')
	if !ok || i < 1 || j < i || strings.ContainsRune(rest[:i], '}') {
		return ruleScope{}, false
	}
	m, r, ok := strings.Cut(rest[i+1:j], " ")
	k = ruleScope{prefix: rest[:i], method: unescape(m), route: unescape(r)}
	tail := rest[j+1:]
	if tail != "" {
		name, named := strings.CutPrefix(tail, " rule:")
		if !named || name == "" || rule.Escape(name, rule.IDSafe) != name {
			return ruleScope{}, false
		}
		k.name = name
	}
	if !ok || k.method == "" || k.route == "" || k.field() != f {
		return ruleScope{}, false // not canonical: no key of a rule names it
	}
	return k, true
}

// unescape undoes writeEscaped; a text that escaping could not have
// written comes out as one that field does not write back the same.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseSetting parses an override's value, "<limit> <window µs>": a
// limit and a window of 0 to rule.MaxWindow; the rule's checks (compileOverride)
// come after.
func parseSetting(s string) (setting, bool) {
	ls, ws, ok := strings.Cut(s, " ")
	limit, err1 := strconv.Atoi(ls)
	us, err2 := strconv.ParseInt(ws, 10, 64)
	if !ok || err1 != nil || err2 != nil || us < 0 || us > rule.MaxWindow.Microseconds() {
		return setting{}, false
	}
	return setting{limit: limit, window: time.Duration(us) * time.Microsecond}, true
}

// overrides is LimitsKey as one backend loaded it, parsed: every policy of
// the backend reads it, and none keeps a copy. It is never changed once
// made.
type overrides struct {
	rules    map[ruleScope]setting // rules' and plans' overrides
	who      map[whoKey]setting    // identities' overrides
	prefixes map[string]bool       // the Key prefixes (a plan's with its tag) some override is under
}

// newOverrides parses LimitsKey's fields (field, value, field, value...),
// keeping at most MaxRuleOverrides rules' and MaxIdentityOverrides
// identities' overrides, and leaving out what does not parse.
func newOverrides(fields []string) *overrides {
	ov := &overrides{rules: map[ruleScope]setting{}, who: map[whoKey]setting{}, prefixes: map[string]bool{}}
	for i := 0; i+1 < len(fields); i += 2 {
		f := fields[i]
		set, ok := parseSetting(fields[i+1])
		if !ok {
			continue
		}
		if k, ok := parseRuleField(f); ok {
			if len(ov.rules) < MaxRuleOverrides {
				ov.rules[k] = set
				ov.prefixes[k.prefix] = true
			}
			continue
		}
		// An identity's: its prefix ends where the count's hash tag
		// begins (a Key prefix holds no '{').
		if i := strings.IndexByte(f, '{'); i > 0 && !strings.HasSuffix(f, " *") && len(ov.who) < MaxIdentityOverrides {
			ov.who[whoKey{prefix: f[:i], rest: f[i:]}] = set
			ov.prefixes[f[:i]] = true
		}
	}
	return ov
}

// concerns reports whether some override is under a Key prefix of p's
// rate rules or their plans: a policy none concerns has no view.
func (ov *overrides) concerns(p *Policy) bool {
	for _, r := range p.rules {
		for _, x := range withPlans(r) {
			if ov.prefixes[x.Cfg.Prefix] {
				return true
			}
		}
	}
	return false
}
