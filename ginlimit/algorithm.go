package ginlimit

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/lua"
)

// AlgorithmKind names a rate limiting algorithm. See the package
// documentation for each one's guarantee, error bound and memory.
type AlgorithmKind int

const (
	// SlidingLog is the exact sliding log (the default): a Redis sorted set
	// with one entry per admitted unit in the window.
	SlidingLog AlgorithmKind = iota
	// SlidingCounter divides the window into [SubWindows] parts and sums the
	// counts of the parts that overlap the window. Memory is O(sub-windows).
	SlidingCounter
	// FixedWindow counts per window aligned on the Redis clock; up to twice
	// the limit can pass across a boundary.
	FixedWindow
	// TokenBucket refills limit tokens per window into a bucket of [Burst]
	// tokens (GCRA, one timestamp per key).
	TokenBucket
)

// String returns the algorithm's name, as in the demo's LIMIT_ALGORITHM.
func (a AlgorithmKind) String() string {
	switch a {
	case SlidingLog:
		return "sliding_log"
	case SlidingCounter:
		return "sliding_counter"
	case FixedWindow:
		return "fixed_window"
	case TokenBucket:
		return "token_bucket"
	}
	return fmt.Sprintf("AlgorithmKind(%d)", int(a))
}

// ParseAlgorithm returns the algorithm named s ("sliding_log",
// "sliding_counter", "fixed_window" or "token_bucket").
func ParseAlgorithm(s string) (AlgorithmKind, error) {
	for a := SlidingLog; a <= TokenBucket; a++ {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("ginlimit: unknown algorithm %q: want sliding_log, sliding_counter, fixed_window or token_bucket", s)
}

// DefaultSubWindows is the number of sub-windows of a [SlidingCounter] when
// no [SubWindows] is given.
const DefaultSubWindows = 10

// algorithms is the number of algorithms: the kinds are 0 to algorithms-1.
const algorithms = int(TokenBucket) + 1

// The scripts are immutable: redis.Script holds only the source and its
// SHA1, and Run sends EVALSHA and falls back to EVAL on NOSCRIPT. The
// numbering of the algorithms in their arguments is AlgorithmKind's: the
// several-rule script is built from this enum, so Lua never depends on the
// order of these constants by hand.
var (
	singleScripts = func() (s [algorithms]*redis.Script) {
		for a := range s {
			s[a] = redis.NewScript(lua.Single(AlgorithmKind(a).String(), a))
		}
		return s
	}()
	severalScript = func() *redis.Script {
		names := make([]string, algorithms)
		for a := range names {
			names[a] = AlgorithmKind(a).String()
		}
		return redis.NewScript(lua.Several(names...))
	}()
)

// param is the algorithm's own script argument for rule settings r.
func (a AlgorithmKind) param(r *ruleConfig) int {
	switch a {
	case SlidingCounter:
		return r.subWindows
	case TokenBucket:
		return r.burstOrLimit()
	case SlidingLog:
		return exactBelow
	}
	return 0
}

// maxCost is the most one request can ever be admitted with under rule
// settings r: the limit, or a token bucket's burst.
func (a AlgorithmKind) maxCost(r *ruleConfig) int {
	if a == TokenBucket {
		return r.burstOrLimit()
	}
	return r.limit
}

func (r *ruleConfig) burstOrLimit() int {
	if r.burst > 0 {
		return r.burst
	}
	return r.limit
}

// Algorithm sets the rule's algorithm. The default is [SlidingLog].
func Algorithm(a AlgorithmKind) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if a < SlidingLog || a > TokenBucket {
			return fmt.Errorf("Algorithm(%v): want SlidingLog, SlidingCounter, FixedWindow or TokenBucket", a)
		}
		r.alg = a
		return nil
	})
}

// SubWindows sets how many parts a [SlidingCounter] divides its window into.
// It must be from 1 to 1000 and divide the window in whole microseconds. The
// default is [DefaultSubWindows].
func SubWindows(n int) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("SubWindows(%d): want 1 to 1000", n)
		}
		r.subWindows = n
		return nil
	})
}

// Burst sets a [TokenBucket]'s capacity: how many units can pass at once
// after a quiet spell. It must be between 1 and 1e9. The default is the
// limit.
func Burst(n int) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if n < 1 || n > 1e9 {
			return fmt.Errorf("Burst(%d): the burst must be between 1 and 1e9", n)
		}
		r.burst = n
		return nil
	})
}
