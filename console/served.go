package console

import (
	"slices"
	"strconv"
	"strings"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// served is one rule on a route some instance served: gin tells a Policy
// its route only at a request, so each instance shares on its beat the
// routes its rules have served, and every instance lists a rule on each.
// The policy is named by its place in Limiter.Rules (the order compiled),
// which is the same on every instance of one application.
type served struct {
	policy      int
	rule, route string
}

// String is the member of keyRoutes: "<policy>\n<rule>\n<route>".
func (s served) String() string { return strconv.Itoa(s.policy) + "\n" + s.rule + "\n" + s.route }

// parseServed reads the routes of a beat's reply, leaving out a member
// that is not one, and any past maxRoutes.
func parseServed(v any) ([]served, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errReply
	}
	var out []served
	for _, x := range list[:min(len(list), maxRoutes)] {
		m, ok := x.(string)
		if !ok {
			return nil, errReply
		}
		p, rest, ok1 := strings.Cut(m, "\n")
		rule, route, ok2 := strings.Cut(rest, "\n")
		n, err := strconv.Atoi(p)
		if ok1 && ok2 && err == nil && n >= 0 && rule != "" && route != "" {
			out = append(out, served{n, rule, route})
		}
	}
	return out, nil
}

// policies numbers the policies of rules, as Limiter.Rules lists them.
func policies(rules []ginlimit.RuleInfo) map[*ginlimit.Policy]int {
	out := map[*ginlimit.Policy]int{}
	for _, ri := range rules {
		if _, ok := out[ri.Policy]; !ok {
			out[ri.Policy] = len(out)
		}
	}
	return out
}

// served returns the routes this instance's rules have served, to share.
func (f *fleet) served() []served {
	rules := f.limiter.Rules()
	ord := policies(rules)
	var out []served
	for _, ri := range rules {
		if ri.Route != "" && len(out) < maxRoutes {
			out = append(out, served{ord[ri.Policy], ri.Rule, ri.Route})
		}
	}
	return out
}

// rules is Limiter.Rules with each rule also on the routes that other
// instances served and this one has not, as the last beat read them
// (and, with Config.Routes, only routes of the application); a rule
// listed without a route until then is listed on those instead.
func (f *fleet) rules() []ginlimit.RuleInfo {
	local := f.limiter.Rules()
	f.mu.Lock()
	known := f.routes
	f.mu.Unlock()
	if len(known) == 0 {
		return local
	}
	var app map[string]bool
	if f.appRoutes != nil {
		app = map[string]bool{}
		for _, r := range f.appRoutes() {
			app[r.Method+" "+r.Path] = true
		}
	}
	ord := policies(local)
	byPlace := make([]*ginlimit.Policy, len(ord))
	for p, i := range ord {
		byPlace[i] = p
	}
	type ruleOf struct {
		policy int
		rule   string
	}
	has, like := map[served]bool{}, map[ruleOf]ginlimit.RuleInfo{}
	for _, ri := range local {
		has[served{ord[ri.Policy], ri.Rule, ri.Route}] = true
		like[ruleOf{ord[ri.Policy], ri.Rule}] = ri
	}
	extra := map[*ginlimit.Policy][]ginlimit.RuleInfo{}
	for _, s := range known {
		ri, ok := like[ruleOf{s.policy, s.rule}]
		if !ok || has[s] || app != nil && !app[s.route] {
			continue
		}
		if on, err := ri.On(s.route); err == nil {
			has[s] = true
			extra[byPlace[s.policy]] = append(extra[byPlace[s.policy]], on)
		}
	}
	return merged(local, extra)
}

// merged lists local with each policy's extra rules after its own, the
// policy's rules without a route left out when it has extra ones.
func merged(local []ginlimit.RuleInfo, extra map[*ginlimit.Policy][]ginlimit.RuleInfo) []ginlimit.RuleInfo {
	out := make([]ginlimit.RuleInfo, 0, len(local))
	for i, ri := range local {
		more := extra[ri.Policy]
		if ri.Route != "" || len(more) == 0 {
			out = append(out, ri)
		}
		if i+1 == len(local) || local[i+1].Policy != ri.Policy {
			slices.SortStableFunc(more, func(a, b ginlimit.RuleInfo) int { return strings.Compare(a.Route, b.Route) })
			out = append(out, more...)
		}
	}
	return out
}
