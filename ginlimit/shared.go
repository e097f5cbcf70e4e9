package ginlimit

import (
	"fmt"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// A [Shared] rule's key leaves the route out (rule.BuildKey); what else a
// group needs lives here: a route with Rules keeps its rate rules (and
// its in-flight rules) all Shared or none, so that one script call's keys
// share a hash tag, and within one Limiter the routes of a group agree on
// the rule's settings, so that a typo never splits a group silently (a
// different algorithm or shape is a different key, see Algorithm.Tag) or makes
// the routes judge one count by different limits.

// checkShared refuses a route whose rate rules, or whose in-flight rules,
// are some Shared and some not: each kind is decided in one script call,
// whose keys must share a Redis Cluster hash tag.
func checkShared(all []rule.Any) error {
	mixed := func(rules []rule.Any) error {
		for _, r := range rules[1:] {
			if r.Core().Shared != rules[0].Core().Shared {
				return fmt.Errorf("rules %q and %q: one is Shared and the other is not; a route's rules are decided in one Redis call, so give the group's rules Per(Shared) in an annotation of their own (api.Use(limiter.RateLimit(...)))",
					rules[0].Core().Name, r.Core().Name)
			}
		}
		return nil
	}
	var rates, slots []rule.Any
	for _, r := range all {
		if _, ok := r.(*rule.InFlight); ok {
			slots = append(slots, r)
		} else {
			rates = append(rates, r)
		}
	}
	for _, rules := range [][]rule.Any{rates, slots} {
		if len(rules) > 1 {
			if err := mixed(rules); err != nil {
				return err
			}
		}
	}
	return nil
}

// group is a Shared group as the first route of a Limiter to claim it
// declared it: its settings, and its rule, whose in-process state (deny
// cache, FailLocal buckets) the group's later routes on the same backend
// take, so that a key has one such state per instance, as it has one
// count in Redis: a fallback on any route of the group then continues from
// what Redis last said for the key on any other.
type group struct {
	terms  string
	rule   rule.Any
	engine *engine.Engine
}

// claimGroups records the groups of p's Shared rules in l, and refuses p
// when another route of l gave one of them other settings. p's rules of a
// group already claimed take its state.
func (l *Limiter) claimGroups(p *Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range p.route.All {
		b := r.Core()
		if b.Group == "" {
			continue
		}
		if l.groups == nil {
			l.groups = map[string]group{}
		}
		g, ok := l.groups[b.Group]
		switch {
		case !ok:
			l.groups[b.Group] = group{terms: b.GroupTerms, rule: r, engine: p.route.Engine}
		case g.terms != b.GroupTerms:
			return fmt.Errorf("rule %q: another route shares its count (the same Key and Name) with %s; this one gives %s: the routes of a group must agree, or take a Key or Name of their own",
				b.Name, g.terms, b.GroupTerms)
		case g.engine == p.route.Engine:
			takeState(r, g.rule)
		}
	}
	return nil
}

// takeState makes r, a rule of a group, use the in-process state of from,
// the group's first: the deny caches and fallbacks of the rule, its Ban
// and its plans, each where both have one.
func takeState(r, from rule.Any) {
	if s, ok := r.(*rule.InFlight); ok {
		if f := from.(*rule.InFlight); s.Local != nil && f.Local != nil {
			s.Local = f.Local
		}
		return
	}
	rr, f := r.(*rule.Rate), from.(*rule.Rate)
	if rr.Deny != nil && f.Deny != nil {
		rr.Deny = f.Deny
	}
	if rr.Local != nil && f.Local != nil {
		rr.Local = f.Local
	}
	if rr.Ban != nil && f.Ban != nil {
		if rr.Ban.Deny != nil && f.Ban.Deny != nil {
			rr.Ban.Deny = f.Ban.Deny
		}
		if rr.Ban.Local != nil && f.Ban.Local != nil {
			rr.Ban.Local = f.Ban.Local
		}
	}
	for name, pr := range rr.Plans {
		if fp := f.Plans[name]; fp != nil {
			takeState(pr, fp)
		}
	}
}
