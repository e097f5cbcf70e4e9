package ginlimit

import (
	"fmt"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
)

// Bans: a rate rule with [Ban] carries a rule.Ban, compiled in internal/rule and decided
// in the same script call, before its rule, on a key in the same slot; the
// request folds its decision into the rule's (internal/decide: parse).

// banAlg is a ban's AlgorithmKind: its name, "penalty", gives its number
// in the several-rule scripts (lua.Numbered). It is not an algorithm a
// rule can choose.
const banAlg AlgorithmKind = "penalty"

// DefaultBanMessage is the message of the 429 a banned identity gets. A
// [Respond] function can write another, reading [Decision.Banned].
const DefaultBanMessage = "You are temporarily banned for sending too many requests, please try again later"

// MaxBan is the longest ban [Ban] takes: 1e9 milliseconds, about 11.6
// days. The script counts a ban in milliseconds, its param, and takes at
// most lua.MaxParam of them (lua/rule.lua), so a longer one would be
// refused by Redis on every decision; [Ban] refuses it at start-up instead.
const MaxBan = lua.MaxParam * time.Millisecond

// Ban bans an identity from the rule for duration once it has collected
// after refusals within within: while banned, every request of that
// identity on the rule gets 429 with [DefaultBanMessage] ([Respond] can
// write another when [Decision.Banned]), a Retry-After of the time the ban
// has left, and the outcome [OutcomeBanned].
//
// Every refusal on the route counts (this rule's, another [Rule]'s, an
// [InFlight] rule's), including those answered from the deny cache, which
// are reported with the key's next call or at most [DefaultMaxStaleness]
// later, before that call's request is judged. The strikes and the ban
// live in Redis, decided in the rule's own call, so every instance shares
// them. [Policy.Peek] shows a ban, [Policy.Reset] lifts it. after is 1 to
// 1e6, within 1 ms to about 31 years, duration 1 ms to [MaxBan]; with
// [LimitBy] every plan has its own strikes and bans.
func Ban(after int, within, duration time.Duration) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		switch {
		case after < 1 || after > 1e6:
			return fmt.Errorf("Ban(%d, %v, %v): want 1 to 1e6 refusals", after, within, duration)
		case within < time.Millisecond || within > rule.MaxWindow:
			return fmt.Errorf("Ban(%d, %v, %v): the period must be from 1ms to %v", after, within, duration, rule.MaxWindow)
		case duration < time.Millisecond || duration > MaxBan:
			return fmt.Errorf("Ban(%d, %v, %v): the ban must last from 1ms to %v", after, within, duration, MaxBan)
		}
		r.Rate.Ban = &rule.BanConfig{After: after, Within: within.Truncate(time.Microsecond), Duration: duration.Truncate(time.Millisecond), Message: DefaultBanMessage}
		return nil
	})
}
