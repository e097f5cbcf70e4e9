package ginlimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/lua"
)

// Limits chosen per request: a rule declares, at start-up, the plans it can
// apply, and each request picks one with [LimitBy]. Each plan compiles into
// a rule of its own (planFor returns the request's).

// maxPlans bounds how many plans one rule declares.
const maxPlans = 64

// LimitBy lets each request choose the rule's limit among plans declared
// here (per subscription, per tenant): pick names the request's plan, and
// "" or an unknown name gives the rule's own Limit. Each plan is a limit on
// the rule's Window, checked at start-up as the rule's own is, and keeps
// its own counts; the headers report the plan that applied. pick runs on
// every request, before the identity is checked, and must be fast and safe
// for concurrent use. At most 64 plans. To pick by a claim of the verified
// token (one that does not verify gives "" here and 401 from the rule):
//
//	ginlimit.LimitBy(func(c *gin.Context) string {
//		plan, _ := jwt.Claim(c, "plan") // jwt is the rule's *identity.JWT
//		return plan
//	}, map[string]int{"pro": 100, "enterprise": 1000})
func LimitBy(pick func(c *gin.Context) string, limits map[string]int) RuleOption {
	limits = maps.Clone(limits)
	return ruleOption(func(r *ruleConfig) error {
		if pick == nil {
			return errors.New("LimitBy(nil, ...): the pick function must not be nil")
		}
		if err := checkPlans(limits); err != nil {
			return err
		}
		r.planPick, r.plans = pick, limits
		return nil
	})
}

// checkPlans checks the limits given to LimitBy.
func checkPlans(limits map[string]int) error {
	if len(limits) == 0 || len(limits) > maxPlans {
		return fmt.Errorf("LimitBy: %d plans, want 1 to %d", len(limits), maxPlans)
	}
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		switch n := limits[name]; {
		case name == "" || len(name) > 64:
			return fmt.Errorf("LimitBy: plan %q: want a name of 1 to 64 bytes", name)
		case n < 1 || n > lua.MaxLimit:
			return fmt.Errorf("LimitBy: plan %q has limit %d, want 1 to 1e9", name, n)
		}
	}
	return nil
}

// compilePlans compiles one rule per plan beside r, the default plan's. A
// plan's rule keeps r's name; its key prefix carries the plan, so two plans
// never share counts.
func (r *rateRule) compilePlans(rc ruleConfig, route *routeConfig, named bool) error {
	r.pick, r.plans = rc.planPick, map[string]*rateRule{}
	for name, limit := range rc.plans {
		pc := rc
		pc.planPick, pc.plans, pc.limit, pc.name = nil, nil, limit, r.name
		pc.prefix = rc.prefix + planTag(name)
		pr, err := compileRate(pc, route, named)
		if err != nil {
			return fmt.Errorf("plan %q: %w", name, err)
		}
		pr.of = r
		r.plans[name] = pr
	}
	return nil
}

// planFor returns the rule of the request's plan, or r.
func (r *rateRule) planFor(c *gin.Context) *rateRule {
	if p := r.plans[r.pick(c)]; p != nil {
		return p
	}
	return r
}
