package ginlimit

import (
	"fmt"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// In-flight limits: a rule made with InFlight caps how many requests are
// being served at once, over every instance, instead of how many arrive per
// window. A request takes a slot before the rest of the chain runs and
// gives it back when the chain returns, panics included; a slot is leased
// on the Redis clock, so the slots of an instance that died free
// themselves, and the lease of a request still running is renewed every
// third of the lease. The script is lua/inflight.lua.

// Bounds of [InFlight].
const (
	// MaxInFlight is the largest n [InFlight] accepts.
	MaxInFlight = 1_000_000
	// MinLease and MaxLease bound the lease [InFlight] accepts.
	MinLease = time.Millisecond
	MaxLease = time.Hour
)

// InFlightRetryAfter is the Retry-After of a request refused by an
// in-flight rule, and its [Decision.RetryAfter] and Reset: a slot frees
// when a request being served ends, which nobody can predict, so it is the
// shortest Retry-After there is, one second.
const InFlightRetryAfter = decide.InFlightRetryAfter

// InFlight makes the rule an in-flight limit: at most n requests of the
// rule, per each combination of its dimensions ([Per]), are being served
// at once over every instance sharing the Redis. A request takes a slot
// before the rest of the chain runs and gives it back when the chain
// returns, a panic included. A slot is a lease on the Redis clock, renewed
// every lease/3 while the handler runs, so a dead instance's slots free
// themselves; choose a lease a few times the [Timeout] (30 s is a good
// default).
//
// When no slot is free the request gets 429 with the rule's [Message] and
// Retry-After: 1 ([InFlightRetryAfter]). The route's rate rules are decided
// first, and only a request they admit asks for slots. An in-flight rule
// refuses [Cost], [LimitBy] and [Ban]. n must be from 1 to [MaxInFlight],
// lease from [MinLease] to [MaxLease]. docs/features.md ("In-flight
// limits") gives the failure policies and the leases' own capacity.
func InFlight(n int, lease time.Duration) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		switch {
		case n < 1 || n > MaxInFlight:
			return fmt.Errorf("InFlight(%d, %v): n must be from 1 to %d", n, lease, MaxInFlight)
		case lease < MinLease || lease > MaxLease:
			return fmt.Errorf("InFlight(%d, %v): the lease must be from %v to %v", n, lease, MinLease, MaxLease)
		}
		r.InFlight = rule.InFlightConfig{N: n, Lease: lease.Truncate(time.Microsecond)}
		return nil
	})
}
