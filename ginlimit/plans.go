package ginlimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/lua"
)

// Limits chosen per request: a rule declares, at start-up, the plans it can
// apply, and each request picks one. [LimitBy] picks with a function of the
// request; [Tiers] is LimitBy with a claim of the verified token. Both fill
// the same configuration and compile into one rule per plan (planFor
// returns the request's), so there is one way to do it.

// Plan is one limit a rule can apply instead of its own: Limit requests per
// Window. A zero Window is the rule's Window.
type Plan struct {
	Limit  int
	Window time.Duration
}

// maxPlans bounds how many plans one rule declares.
const maxPlans = 64

// LimitBy lets each request choose the rule's limit among plans declared
// here, such as plans per subscription or per tenant: pick returns the name
// of the request's plan, and "" or a name not in plans gives the rule's own
// Limit and Window. Every plan is checked at start-up as the rule's own
// limit is (its window, and against the rule's algorithm, burst and cost);
// nothing a request says can set a limit that was not declared. Each plan
// keeps its own counts (its keys carry "tier=<name>:"), so a client that
// changes plan starts afresh, and the headers report the limit of the plan
// that applied. pick runs on every request, before the identity is checked,
// and must be fast and safe for concurrent use. At most 64 plans.
func LimitBy(pick func(c *gin.Context) string, plans map[string]Plan) RuleOption {
	plans = maps.Clone(plans)
	return ruleOption(func(r *ruleConfig) error {
		if pick == nil {
			return errors.New("LimitBy(nil, ...): the pick function must not be nil")
		}
		if err := checkPlans("LimitBy", plans); err != nil {
			return err
		}
		r.planPick, r.planClaim, r.plans = pick, "", plans
		return nil
	})
}

// Tiers gives users a different limit by a claim of their verified token:
// with Tiers("tier", map[string]int{"pro": 100, "enterprise": 1000}) a user
// whose token says "tier":"pro" gets 100 per window, and any other value
// (or none) the rule's Limit. It is [LimitBy] with each tier a [Plan] of
// the rule's Window and pick reading the claim, so everything LimitBy says
// holds. It applies to rules that count per user ([Type](User), [ByUser])
// whose UserIdentity can read claims (identity.Claimer, such as
// identity.JWT), on single-rule routes and in a [Rule] alike. The token is
// verified once more to read the claim.
func Tiers(claim string, limits map[string]int) RuleOption {
	plans := make(map[string]Plan, len(limits))
	for tier, n := range limits {
		plans[tier] = Plan{Limit: n}
	}
	return ruleOption(func(r *ruleConfig) error {
		if claim == "" || len(limits) == 0 {
			return fmt.Errorf("Tiers(%q, ...): want a claim name and at least one tier", claim)
		}
		if err := checkPlans(fmt.Sprintf("Tiers(%q)", claim), plans); err != nil {
			return err
		}
		r.planPick, r.planClaim, r.plans = nil, claim, plans
		return nil
	})
}

// checkPlans checks the plans given to the option what.
func checkPlans(what string, plans map[string]Plan) error {
	if len(plans) == 0 || len(plans) > maxPlans {
		return fmt.Errorf("%s: %d plans, want 1 to %d", what, len(plans), maxPlans)
	}
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		p := plans[name]
		switch {
		case name == "" || len(name) > 64:
			return fmt.Errorf("%s: plan %q: want a name of 1 to 64 bytes", what, name)
		case p.Limit < 1 || p.Limit > lua.MaxLimit:
			return fmt.Errorf("%s: plan %q has limit %d, want 1 to 1e9", what, name, p.Limit)
		case p.Window != 0 && (p.Window < time.Millisecond || p.Window > maxWindow):
			return fmt.Errorf("%s: plan %q has window %v, want 0 (the rule's) or 1ms to %v", what, name, p.Window, maxWindow)
		}
	}
	return nil
}

// compilePlans compiles one rule per plan beside r, the default plan's. A
// plan's rule keeps r's name; its key prefix carries the plan, so two plans
// never share counts.
func (r *rule) compilePlans(rc ruleConfig, route *routeConfig, named bool) error {
	pick := rc.planPick
	if rc.planClaim != "" {
		if !slices.ContainsFunc(rc.dims, func(d Dimension) bool { return d.kind == dimUser }) {
			return errors.New("Tiers: applies to rules that count per user (Type(User), ByUser) only")
		}
		claimer, ok := rc.users.(identity.Claimer)
		if !ok {
			return fmt.Errorf("Tiers: the UserIdentity (%T) cannot read claims (identity.Claimer)", rc.users)
		}
		claim := rc.planClaim
		pick = func(c *gin.Context) string {
			v, err := claimer.Claim(c, claim)
			if err != nil {
				return "" // identify answers the missing identity
			}
			return v
		}
	}
	r.pick, r.plans = pick, map[string]*rule{}
	for name, plan := range rc.plans {
		pc := rc
		pc.planPick, pc.planClaim, pc.plans, pc.limit, pc.name = nil, "", nil, plan.Limit, r.name
		if plan.Window != 0 {
			pc.window = plan.Window.Truncate(time.Microsecond)
		}
		pc.prefix = rc.prefix + "tier=" + escape(name, idSafe) + ":"
		pr, err := compileRule(pc, route, named)
		if err != nil {
			return fmt.Errorf("plan %q: %w", name, err)
		}
		r.plans[name] = pr
	}
	return nil
}

// planFor returns the rule of the request's plan, or r.
func (r *rule) planFor(c *gin.Context) *rule {
	if p := r.plans[r.pick(c)]; p != nil {
		return p
	}
	return r
}
