package ginlimit

import (
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

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

// The several-rule scripts are immutable: redis.Script holds only the
// source and its SHA1, and Run sends EVALSHA and falls back to EVAL on
// NOSCRIPT. They number the algorithms as lua.Numbered lists them, which
// ruleArgs looks up by name, so that no Go constant's order has to match
// the Lua's. Each rule's single-rule script has its settings written into
// it (lua.Single, in compileRule).
var (
	severalScript = redis.NewScript(lua.Several())
	// peekScript is severalScript recording nothing: Policy.Peek.
	peekScript = redis.NewScript(lua.Peek())
)

// ruleArgs returns a rule's settings in the several-rule script's
// arguments: ArgsPerRule values with the algorithm's number, the window
// in µs, the limit and param at their offsets, and the cost's left for
// each call to fill in (severalArgs).
func ruleArgs(a AlgorithmKind, window time.Duration, limit, param int) []any {
	args := make([]any, lua.ArgsPerRule)
	args[lua.ArgAlgorithm] = slices.Index(lua.Numbered(), string(a))
	args[lua.ArgWindow], args[lua.ArgLimit], args[lua.ArgParam] = window.Microseconds(), limit, param
	return args
}

// singleArgs returns the single-rule script's arguments: the test clock
// ("" for Redis TIME), then the cost.
func singleArgs(clock any, cost int) []any {
	args := make([]any, lua.SingleArgs)
	args[lua.ArgClock], args[lua.SingleArgCost] = clock, cost
	return args
}

// maxSafe is the largest integer the scripts' doubles hold exactly, 2^53.
const maxSafe = 1 << 53

// validate refuses at start-up a rule the algorithm's script would refuse
// on every request, naming the options.
func (a AlgorithmKind) validate(r *ruleConfig) error {
	switch a {
	case SlidingCounter:
		if r.window.Microseconds()%int64(r.subWindows) != 0 {
			return fmt.Errorf("Window(%v): a SlidingCounter's window must divide into %d sub-windows of whole microseconds", r.window, r.subWindows)
		}
	case SlidingLog:
		// The log keeps an entry per unit in the window, each a time in ms
		// that takes 4 bytes from a base it moves on at most every 2^31 ms.
		if r.limit > lua.MaxLogLimit {
			return fmt.Errorf("Limit(%d): a SlidingLog keeps 4 bytes per unit in the window and takes a limit of at most %d; use SlidingCounter for more", r.limit, lua.MaxLogLimit)
		}
		if r.window > lua.MaxLogWindow*time.Microsecond {
			return fmt.Errorf("Window(%v): a SlidingLog takes a window of at most %v; use SlidingCounter for longer", r.window, lua.MaxLogWindow*time.Microsecond)
		}
	case TokenBucket:
		// The bucket keeps its state in 1/limit µs, a token being window
		// units: burst*window must stay exact in a double.
		if b := int64(r.burstOrLimit()); b > maxSafe/r.window.Microseconds() {
			return fmt.Errorf("Algorithm(TokenBucket) with Burst %d (default: the Limit) and Window(%v): burst × window (µs) must not exceed 2^53; lower the burst or the window", b, r.window)
		}
	}
	return nil
}

// param is the algorithm's own script argument for rule settings r.
func (a AlgorithmKind) param(r *ruleConfig) int {
	switch a {
	case SlidingCounter:
		return r.subWindows
	case TokenBucket:
		return r.burstOrLimit()
	case SlidingLog:
		// Where slidingLogTag starts in the key (see zsetKey).
		return len(r.prefix)
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

// Algorithm sets the rule's algorithm, such as [TokenBucket] or
// ginlimit.AlgorithmKind(os.Getenv("LIMIT_ALGORITHM")). The default is
// [SlidingLog].
func Algorithm(a AlgorithmKind) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		switch a {
		case SlidingLog, SlidingCounter, FixedWindow, TokenBucket:
		default:
			return fmt.Errorf("Algorithm(%q): want sliding_log, sliding_counter, fixed_window or token_bucket", string(a))
		}
		r.alg = a
		return nil
	})
}

// overrideWindow sets r, the settings an override is compiled from, to
// window, keeping what gives its algorithm's stored data its shape
// (keyTag), so that the override counts on the key the rule counts on and
// keeps what was spent there: a SlidingCounter keeps its sub-window
// length, and takes a window of 1 to 1000 of them (a window start-up would
// refuse is left to validate, which says why).
func overrideWindow(r *ruleConfig, window time.Duration) error {
	sub := r.window.Microseconds() / int64(r.subWindows)
	if err := Window(window).applyRule(r); err != nil || r.alg != SlidingCounter || r.window.Microseconds()%int64(r.subWindows) != 0 {
		return err
	}
	n := r.window.Microseconds() / sub
	if r.window.Microseconds()%sub != 0 || n > 1000 {
		return fmt.Errorf("Window(%v): an override of a SlidingCounter keeps the rule's sub-window length, %v, so that its count goes on: the window must be 1 to 1000 times that", window, time.Duration(sub)*time.Microsecond)
	}
	r.subWindows = int(n)
	return nil
}

// subWindows replaces [DefaultSubWindows], from 1 to 1000, dividing the
// window in whole microseconds; tests and the bench's model checks vary it.
func subWindows(n int) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("subWindows(%d): want 1 to 1000", n)
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
		if n < 1 || n > lua.MaxParam {
			return fmt.Errorf("Burst(%d): the burst must be between 1 and 1e9", n)
		}
		r.burst = n
		return nil
	})
}
