package ginlimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// Tiers gives users a different limit by a claim of their verified token:
// with Tiers("tier", map[string]int{"pro": 100, "enterprise": 1000}) a user
// whose token says "tier":"pro" gets 100 per window, and any other value
// (or none) the rule's Limit. The limits are declared here, on the rule;
// nothing is taken raw from the token. It applies to User rules whose
// UserIdentity can read claims (identity.Claimer, such as identity.JWT),
// on single-rule routes and in a [Rule] alike. Each tier keeps its own
// counters, so a user who changes tier starts afresh. The token is
// verified once more to read the claim.
func Tiers(claim string, limits map[string]int) RuleOption {
	limits = maps.Clone(limits)
	return ruleOption(func(r *ruleConfig) error {
		if claim == "" || len(limits) == 0 {
			return fmt.Errorf("Tiers(%q, ...): want a claim name and at least one tier", claim)
		}
		for tier, n := range limits {
			if n < 1 || n > 1e9 {
				return fmt.Errorf("Tiers(%q): tier %q has limit %d, want 1 to 1e9", claim, tier, n)
			}
		}
		r.tierClaim, r.tierLimits = claim, limits
		return nil
	})
}

// compileTiers compiles one rule per tier beside r, the default tier's.
// A tier's rule keeps r's name; its key prefix carries the tier, so two
// tiers never share counters.
func (r *rule) compileTiers(rc ruleConfig, route *routeConfig, named bool) error {
	if !slices.ContainsFunc(rc.dims, func(d Dimension) bool { return d.kind == dimUser }) {
		return errors.New("Tiers: applies to Type(User) rules only")
	}
	if _, ok := rc.users.(identity.Claimer); !ok {
		return fmt.Errorf("Tiers: the UserIdentity (%T) cannot read claims (identity.Claimer)", rc.users)
	}
	r.tierClaim, r.tiers = rc.tierClaim, map[string]*rule{}
	for tier, n := range rc.tierLimits {
		tc := rc
		tc.tierClaim, tc.tierLimits, tc.limit, tc.name = "", nil, n, r.name
		tc.prefix = rc.prefix + "tier=" + escape(tier, idSafe) + ":"
		tr, err := compileRule(tc, route, named)
		if err != nil {
			return fmt.Errorf("Tiers: tier %q: %w", tier, err)
		}
		r.tiers[tier] = tr
	}
	return nil
}

// tierFor returns the rule of the request's tier, or r.
func (r *rule) tierFor(c *gin.Context) *rule {
	v, err := r.users.(identity.Claimer).Claim(c, r.tierClaim)
	if err != nil {
		return r // identify answers the missing identity
	}
	if t := r.tiers[v]; t != nil {
		return t
	}
	return r
}
