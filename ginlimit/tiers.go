package ginlimit

import (
	"errors"
	"fmt"
	"maps"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// Tiers gives users a different limit by a claim of their verified token:
// with Tiers("tier", map[string]int{"pro": 100, "enterprise": 1000}) a user
// whose token says "tier":"pro" gets 100 per window, and any other value
// (or none) the route's Limit. The limits are declared here, on the route;
// nothing is taken raw from the token. It applies to User rules whose
// UserIdentity can read claims (identity.Claimer, such as identity.JWT),
// and not to several-rule routes. Each tier keeps its own counters, so a
// user who changes tier starts afresh. The token is verified once more to
// read the claim.
func Tiers(claim string, limits map[string]int) Option {
	limits = maps.Clone(limits)
	return optionFunc(func(s *settings) {
		if claim == "" || len(limits) == 0 {
			s.invalid("Tiers(%q, ...): want a claim name and at least one tier", claim)
			return
		}
		for tier, n := range limits {
			if n < 1 || n > 1e9 {
				s.invalid("Tiers(%q): tier %q has limit %d, want 1 to 1e9", claim, tier, n)
				return
			}
		}
		s.tierClaim, s.tierLimits = claim, limits
	})
}

// compileTiers compiles one policy per tier; p is the default tier's.
func compileTiers(p *Policy, s settings, logs *logThrottle) error {
	if s.typ != User {
		return errors.New("ginlimit: Tiers: applies to Type(User) rules only")
	}
	if _, ok := s.users.(identity.Claimer); !ok {
		return fmt.Errorf("ginlimit: Tiers: the UserIdentity (%T) cannot read claims (identity.Claimer)", s.users)
	}
	p.tierClaim, p.tiers = s.tierClaim, map[string]*Policy{}
	for tier, n := range s.tierLimits {
		ts := s
		ts.tierClaim, ts.tierLimits, ts.limit = "", nil, n
		// The tier is part of the key, so two tiers never share counters.
		ts.prefix = s.prefix + "tier=" + string(appendEscaped(nil, tier)) + ":"
		tp, err := compile(ts, logs)
		if err != nil {
			return fmt.Errorf("ginlimit: Tiers: tier %q: %w", tier, err)
		}
		p.tiers[tier] = tp
	}
	return nil
}

// tierFor returns the policy of the request's tier, or p.
func (p *Policy) tierFor(c *gin.Context) *Policy {
	v, err := p.users.(identity.Claimer).Claim(c, p.tierClaim)
	if err != nil {
		return p // the default path answers the missing identity
	}
	if t := p.tiers[v]; t != nil {
		return t
	}
	return p
}

// appendEscaped appends s with every byte that is not safe in an identity
// percent-escaped.
func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if idSafe(s[i]) {
			dst = append(dst, s[i])
			continue
		}
		dst = append(dst, '%', hexDigits[s[i]>>4], hexDigits[s[i]&0xf])
	}
	return dst
}
