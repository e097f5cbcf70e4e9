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

// scripts are immutable: redis.Script holds only the source and its SHA1.
// Run sends EVALSHA and falls back to EVAL on NOSCRIPT.
var (
	slidingLogScript     = redis.NewScript(lua.SlidingLog())
	slidingCounterScript = redis.NewScript(lua.SlidingCounter())
	fixedWindowScript    = redis.NewScript(lua.FixedWindow())
	tokenBucketScript    = redis.NewScript(lua.TokenBucket())
)

// script returns the algorithm's script and its ARGV[3].
func (a AlgorithmKind) script(s *settings) (*redis.Script, int) {
	switch a {
	case SlidingCounter:
		return slidingCounterScript, s.subWindows
	case FixedWindow:
		return fixedWindowScript, 0
	case TokenBucket:
		return tokenBucketScript, s.burstOrLimit()
	}
	return slidingLogScript, exactBelow
}

func (s *settings) burstOrLimit() int {
	if s.burst > 0 {
		return s.burst
	}
	return s.limit
}

// Algorithm sets the rule's algorithm. The default is [SlidingLog].
func Algorithm(a AlgorithmKind) Option {
	return optionFunc(func(s *settings) {
		if a < SlidingLog || a > TokenBucket {
			s.invalid("Algorithm(%v): want SlidingLog, SlidingCounter, FixedWindow or TokenBucket", a)
			return
		}
		s.alg = a
	})
}

// SubWindows sets how many parts a [SlidingCounter] divides its window into.
// It must be from 1 to 1000 and divide the window in whole microseconds. The
// default is [DefaultSubWindows].
func SubWindows(n int) Option {
	return optionFunc(func(s *settings) {
		if n < 1 || n > 1000 {
			s.invalid("SubWindows(%d): want 1 to 1000", n)
			return
		}
		s.subWindows = n
	})
}

// Burst sets a [TokenBucket]'s capacity: how many units can pass at once
// after a quiet spell. It must be between 1 and 1e9. The default is the
// limit.
func Burst(n int) Option {
	return optionFunc(func(s *settings) {
		if n < 1 || n > 1e9 {
			s.invalid("Burst(%d): the burst must be between 1 and 1e9", n)
			return
		}
		s.burst = n
	})
}
