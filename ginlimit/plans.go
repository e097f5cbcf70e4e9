package ginlimit

import (
	"errors"
	"maps"

	"github.com/gin-gonic/gin"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// Limits chosen per request: a rule declares, at start-up, the plans it can
// apply, and each request picks one with [LimitBy]. Each plan compiles into
// a rule of its own (planFor returns the request's).

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
	return ruleOption(func(r *rule.Config) error {
		if pick == nil {
			return errors.New("LimitBy(nil, ...): the pick function must not be nil")
		}
		if err := rule.CheckPlans(limits); err != nil {
			return err
		}
		r.Rate.PlanPick, r.Rate.Plans = pick, limits
		return nil
	})
}
