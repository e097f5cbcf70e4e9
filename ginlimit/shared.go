package ginlimit

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
)

// A [Shared] rule's key leaves the route out (buildKey); what else a
// group needs lives here: a route with Rules keeps its rate rules (and
// its in-flight rules) all Shared or none, so that one script call's keys
// share a hash tag, and within one Limiter the routes of a group agree on
// the rule's settings, so that a typo never splits a group silently (a
// different algorithm or shape is a different key, see keyTag) or makes
// the routes judge one count by different limits.

// groupOf is, for a Shared rule of these settings, of kind "rate" or
// "in-flight", the group it counts in (its kind, Key and Name) and the
// settings every route of the group must give it; "" for another rule.
func (rc *ruleConfig) groupOf(kind string) (group, terms string) {
	if !rc.shared {
		return "", ""
	}
	dims := make([]string, len(rc.dims))
	for i, d := range rc.dims {
		dims[i] = d.describe()
	}
	var b strings.Builder
	b.WriteString("Per(Shared")
	for _, d := range dims {
		b.WriteString(", " + d)
	}
	b.WriteString(")")
	if kind == "rate" {
		fmt.Fprintf(&b, ", %s, Window(%v), Limit(%d)", rc.alg, rc.window, rc.limit)
		if rc.alg == SlidingCounter {
			b.WriteString(", sub-windows " + strconv.Itoa(rc.subWindows))
		}
		if rc.alg == TokenBucket {
			b.WriteString(", burst " + strconv.Itoa(rc.burst))
		}
	} else {
		fmt.Fprintf(&b, ", InFlight(%d, %v)", rc.slots, rc.lease)
	}
	if rc.ban != nil {
		fmt.Fprintf(&b, ", Ban(%d, %v, %v)", rc.ban.after, rc.ban.within, rc.ban.duration)
	}
	if rc.plans != nil {
		plans := slices.Sorted(maps.Keys(rc.plans))
		for i, name := range plans {
			plans[i] = strconv.Quote(name) + ": " + strconv.Itoa(rc.plans[name])
		}
		b.WriteString(", LimitBy(" + strings.Join(plans, ", ") + ")")
	}
	if rc.hashKey != nil {
		b.WriteString(", HashIdentities")
	}
	return kind + " " + strconv.Quote(rc.prefix) + " " + strconv.Quote(rc.ruleName()), b.String()
}

// checkShared refuses a route whose rate rules, or whose in-flight rules,
// are some Shared and some not: each kind is decided in one script call,
// whose keys must share a Redis Cluster hash tag.
func (p *Policy) checkShared() error {
	mixed := func(rules []anyRule) error {
		for _, r := range rules[1:] {
			if r.base().shared != rules[0].base().shared {
				return fmt.Errorf("rules %q and %q: one is Shared and the other is not; a route's rules are decided in one Redis call, so give the group's rules Per(Shared) in an annotation of their own (api.Use(limiter.RateLimit(...)))",
					rules[0].base().name, r.base().name)
			}
		}
		return nil
	}
	var rates, slots []anyRule
	for _, r := range p.all {
		if _, ok := r.(*slotRule); ok {
			slots = append(slots, r)
		} else {
			rates = append(rates, r)
		}
	}
	for _, rules := range [][]anyRule{rates, slots} {
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
	rule   anyRule
	engine *engine.Engine
}

// claimGroups records the groups of p's Shared rules in l, and refuses p
// when another route of l gave one of them other settings. p's rules of a
// group already claimed take its state.
func (l *Limiter) claimGroups(p *Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range p.all {
		b := r.base()
		if b.group == "" {
			continue
		}
		if l.groups == nil {
			l.groups = map[string]group{}
		}
		g, ok := l.groups[b.group]
		switch {
		case !ok:
			l.groups[b.group] = group{terms: b.groupTerms, rule: r, engine: p.engine}
		case g.terms != b.groupTerms:
			return fmt.Errorf("rule %q: another route shares its count (the same Key and Name) with %s; this one gives %s: the routes of a group must agree, or take a Key or Name of their own",
				b.name, g.terms, b.groupTerms)
		case g.engine == p.engine:
			takeState(r, g.rule)
		}
	}
	return nil
}

// takeState makes r, a rule of a group, use the in-process state of from,
// the group's first: the deny caches and fallbacks of the rule, its Ban
// and its plans, each where both have one.
func takeState(r, from anyRule) {
	if s, ok := r.(*slotRule); ok {
		if f := from.(*slotRule); s.local != nil && f.local != nil {
			s.local = f.local
		}
		return
	}
	rr, f := r.(*rateRule), from.(*rateRule)
	if rr.deny != nil && f.deny != nil {
		rr.deny = f.deny
	}
	if rr.local != nil && f.local != nil {
		rr.local = f.local
	}
	if rr.ban != nil && f.ban != nil {
		if rr.ban.deny != nil && f.ban.deny != nil {
			rr.ban.deny = f.ban.deny
		}
		if rr.ban.local != nil && f.ban.local != nil {
			rr.ban.local = f.ban.local
		}
	}
	for name, pr := range rr.plans {
		if fp := f.plans[name]; fp != nil {
			takeState(pr, fp)
		}
	}
}
