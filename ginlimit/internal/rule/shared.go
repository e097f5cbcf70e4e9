package rule

import "fmt"

// A Shared rule's key leaves the route out (BuildKey); what else a
// group needs lives here: a route with Rules keeps its rate rules (and
// its in-flight rules) all Shared or none, so that one script call's keys
// share a hash tag, and within one Limiter the routes of a group agree on
// the rule's settings, so that a typo never splits a group silently (a
// different algorithm or shape is a different key, see Algorithm.Tag) or makes
// the routes judge one count by different limits.

// CheckShared refuses a route whose rate rules, or whose in-flight rules,
// are some Shared and some not: each kind is decided in one script call,
// whose keys must share a Redis Cluster hash tag.
func CheckShared(all []Any) error {
	mixed := func(rules []Any) error {
		for _, r := range rules[1:] {
			if r.Core().Shared != rules[0].Core().Shared {
				return fmt.Errorf("rules %q and %q: one is Shared and the other is not; a route's rules are decided in one Redis call, so give the group's rules Per(Shared) in an annotation of their own (api.Use(limiter.RateLimit(...)))",
					rules[0].Core().Name, r.Core().Name)
			}
		}
		return nil
	}
	var rates, slots []Any
	for _, r := range all {
		if _, ok := r.(*InFlight); ok {
			slots = append(slots, r)
		} else {
			rates = append(rates, r)
		}
	}
	for _, rules := range [][]Any{rates, slots} {
		if len(rules) > 1 {
			if err := mixed(rules); err != nil {
				return err
			}
		}
	}
	return nil
}

// TakeState makes r, a rule of a group, use the in-process state of from,
// the group's first: the deny caches and fallbacks of the rule, its Ban
// and its plans, each where both have one.
func TakeState(r, from Any) {
	if s, ok := r.(*InFlight); ok {
		if f := from.(*InFlight); s.Local != nil && f.Local != nil {
			s.Local = f.Local
		}
		return
	}
	rr, f := r.(*Rate), from.(*Rate)
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
			TakeState(pr, fp)
		}
	}
}
