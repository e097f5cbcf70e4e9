package ginlimit

import (
	"fmt"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
)

// AlgorithmKind names a rate limiting algorithm. Its value is the name
// ("sliding_log", "sliding_counter", "fixed_window" or "token_bucket"), so
// a configuration string converts to it directly, and [Algorithm] checks
// it. See docs/algorithms.md for each one's guarantee, error bound and
// memory.
type AlgorithmKind string

const (
	// SlidingLog is the exact sliding log (the default): one Redis string
	// per key with a 4-byte entry per admitted unit in the window (the
	// admission time in ms, rounded up). It takes a limit of at most
	// 100,000 and a window of at most 24 days.
	SlidingLog AlgorithmKind = "sliding_log"
	// SlidingCounter divides the window into [DefaultSubWindows] parts and
	// sums the counts of the parts that overlap the window. Memory is
	// O(sub-windows).
	SlidingCounter AlgorithmKind = "sliding_counter"
	// FixedWindow counts per window aligned on the Redis clock; up to twice
	// the limit can pass across a boundary.
	FixedWindow AlgorithmKind = "fixed_window"
	// TokenBucket refills limit tokens per window into a bucket of [Burst]
	// tokens (GCRA, one timestamp per key).
	TokenBucket AlgorithmKind = "token_bucket"
)

// DefaultSubWindows is the number of sub-windows of a [SlidingCounter]: its
// window must be a whole number of microseconds times this.
const DefaultSubWindows = 10

// Algorithm sets the rule's algorithm, such as [TokenBucket] or
// ginlimit.AlgorithmKind(os.Getenv("LIMIT_ALGORITHM")). The default is
// [SlidingLog].
func Algorithm(a AlgorithmKind) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		alg, ok := rule.Lookup(string(a))
		if !ok {
			return fmt.Errorf("Algorithm(%q): want sliding_log, sliding_counter, fixed_window or token_bucket", string(a))
		}
		r.Rate.Alg = alg
		return nil
	})
}

// subWindows replaces [DefaultSubWindows], from 1 to 1000, dividing the
// window in whole microseconds; tests and the bench's model checks vary it.
func subWindows(n int) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("subWindows(%d): want 1 to 1000", n)
		}
		r.Rate.SubWindows = n
		return nil
	})
}

// Burst sets a [TokenBucket]'s capacity: how many units can pass at once
// after a quiet spell. It must be between 1 and 1e9. The default is the
// limit.
func Burst(n int) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if n < 1 || n > lua.MaxParam {
			return fmt.Errorf("Burst(%d): the burst must be between 1 and 1e9", n)
		}
		r.Rate.Burst = n
		return nil
	})
}

// slidingLog is the default algorithm, SlidingLog.
func slidingLog() rule.Algorithm {
	a, _ := rule.Lookup(string(SlidingLog))
	return a
}
