package rule

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/ginlimit/ginlimit/lua"
)

// Algorithm is what the compiler knows of one rate algorithm besides its
// script (lua/<name>.lua): the tag its keys carry, its own script
// argument, the most one request can cost, and the settings its script
// would refuse. Lookup is the one table of them: adding an algorithm is
// its script, its type here, and its line in Lookup.
type Algorithm interface {
	// Name is the algorithm's name: its script's, and the option's value.
	Name() string
	// Tag is what the algorithm adds to a rule's key prefix: see below.
	Tag(s *RateConfig) string
	// Param is the algorithm's own script argument.
	Param(s *RateConfig) int
	// MaxCost is the most one request can ever be admitted with.
	MaxCost(s *RateConfig) int
	// Check refuses at start-up a rule its script would refuse on every
	// request, naming the options.
	Check(s *RateConfig) error
	// Terms is what the routes of a Shared group must agree on beside
	// the window and limit: the settings of the algorithm's own.
	Terms(s *RateConfig) string
}

// Lookup returns the algorithm called name, and whether there is one.
func Lookup(name string) (Algorithm, bool) {
	switch name {
	case "sliding_log":
		return slidingLog{}, true
	case "sliding_counter":
		return slidingCounter{}, true
	case "fixed_window":
		return fixedWindow{}, true
	case "token_bucket":
		return tokenBucket{}, true
	}
	return nil, false
}

// The key tags. An algorithm's tag says the algorithm and what gives its
// stored data its shape. Only the sliding counter's shape depends on a
// setting, its sub-window length (its state is counted in sub-window
// numbers); the token bucket's state is its level, in tokens times the
// window, written with the limit and window it was written under
// (lua/token_bucket.lua), so a new limit or window (an override's) reads
// it on the same key and keeps what was spent (an override of the counter
// keeps its sub-window length: OverrideWindow). So switching a live route
// to another algorithm, or configuring another sub-window length for the
// counter, starts on fresh keys: no script ever meets another's data (no
// WRONGTYPE) or misreads it. A new stored format that the older version's
// script cannot read takes a new tag too, so that during a rolling deploy
// each version keeps its own keys: "fw2:" for the fixed window's string,
// where the version before kept a hash under "fw:"; "sc-<sub-window µs>:"
// for the counter's string, where it kept a hash under "sc<sub-window
// µs>:"; and "tb3:" for the bucket's state with its settings, where the
// versions before kept binary state under "tb-<limit>:" and text under
// "tb<limit>:". For the windows a deploy spans, old and new instances
// then count apart: up to twice the limit, never an error or an unbounded
// bypass. The sliding log's string is under "sl2:" (SlidingLogTag), where
// its ZSET was under no tag; its script reads that ZSET too
// (lua/sliding_log.lua, Upgrade), so that a deploy keeps every count the
// older version wrote before it.

// slidingLog keeps an entry per unit in the window, each a time in ms that
// takes 4 bytes from a base it moves on at most every 2^31 ms.
type slidingLog struct{}

func (slidingLog) Name() string              { return "sliding_log" }
func (slidingLog) Tag(*RateConfig) string    { return SlidingLogTag }
func (slidingLog) MaxCost(s *RateConfig) int { return s.Limit }
func (slidingLog) Terms(*RateConfig) string  { return "" }

// Param is where SlidingLogTag starts in the key (see ZsetKey).
func (slidingLog) Param(s *RateConfig) int { return len(s.Prefix) }

func (slidingLog) Check(s *RateConfig) error {
	if s.Limit > lua.MaxLogLimit {
		return fmt.Errorf("Limit(%d): a SlidingLog keeps 4 bytes per unit in the window and takes a limit of at most %d; use SlidingCounter for more", s.Limit, lua.MaxLogLimit)
	}
	if s.Window > lua.MaxLogWindow*time.Microsecond {
		return fmt.Errorf("Window(%v): a SlidingLog takes a window of at most %v; use SlidingCounter for longer", s.Window, lua.MaxLogWindow*time.Microsecond)
	}
	return nil
}

// slidingCounter sums the counts of the sub-windows that overlap the
// window.
type slidingCounter struct{}

func (slidingCounter) Name() string              { return "sliding_counter" }
func (slidingCounter) Param(s *RateConfig) int   { return s.SubWindows }
func (slidingCounter) MaxCost(s *RateConfig) int { return s.Limit }

func (slidingCounter) Terms(s *RateConfig) string {
	return ", sub-windows " + strconv.Itoa(s.SubWindows)
}

func (slidingCounter) Tag(s *RateConfig) string {
	return "sc-" + strconv.FormatInt(s.Window.Microseconds()/int64(s.SubWindows), 10) + ":"
}

func (slidingCounter) Check(s *RateConfig) error {
	if s.Window.Microseconds()%int64(s.SubWindows) != 0 {
		return fmt.Errorf("Window(%v): a SlidingCounter's window must divide into %d sub-windows of whole microseconds", s.Window, s.SubWindows)
	}
	return nil
}

// fixedWindow counts per window aligned on the Redis clock.
type fixedWindow struct{}

func (fixedWindow) Name() string              { return "fixed_window" }
func (fixedWindow) Tag(*RateConfig) string    { return "fw2:" }
func (fixedWindow) Param(*RateConfig) int     { return 0 }
func (fixedWindow) MaxCost(s *RateConfig) int { return s.Limit }
func (fixedWindow) Check(*RateConfig) error   { return nil }
func (fixedWindow) Terms(*RateConfig) string  { return "" }

// tokenBucket refills limit tokens per window into a bucket of burst
// tokens (GCRA).
type tokenBucket struct{}

func (tokenBucket) Name() string               { return "token_bucket" }
func (tokenBucket) Tag(*RateConfig) string     { return "tb3:" }
func (tokenBucket) Param(s *RateConfig) int    { return s.burstOrLimit() }
func (tokenBucket) MaxCost(s *RateConfig) int  { return s.burstOrLimit() }
func (tokenBucket) Terms(s *RateConfig) string { return ", burst " + strconv.Itoa(s.Burst) }

// Check: the bucket keeps its state in 1/limit µs, a token being window
// units: burst*window must stay exact in a double.
func (tokenBucket) Check(s *RateConfig) error {
	if b := int64(s.burstOrLimit()); b > maxSafe/s.Window.Microseconds() {
		return fmt.Errorf("Algorithm(TokenBucket) with Burst %d (default: the Limit) and Window(%v): burst × window (µs) must not exceed 2^53; lower the burst or the window", b, s.Window)
	}
	return nil
}

// maxSafe is the largest integer the scripts' doubles hold exactly, 2^53.
const maxSafe = 1 << 53

// penalty is a Ban's script in the several-rule scripts
// (lua/penalty.lua); no rule can choose it.
const penalty = "penalty"

func (s *RateConfig) burstOrLimit() int {
	if s.Burst > 0 {
		return s.Burst
	}
	return s.Limit
}

// Args returns a rule's settings in the several-rule script's arguments:
// ArgsPerRule values with the algorithm's number (its name's index in
// lua.Numbered, so that no Go constant's order has to match the Lua's),
// the window in µs, the limit and param at their offsets, and the cost's
// left for each call to fill in.
func Args(name string, window time.Duration, limit, param int) []any {
	args := make([]any, lua.ArgsPerRule)
	args[lua.ArgAlgorithm] = slices.Index(lua.Numbered(), name)
	args[lua.ArgWindow], args[lua.ArgLimit], args[lua.ArgParam] = window.Microseconds(), limit, param
	return args
}

// SingleArgs returns the single-rule script's arguments: the test clock
// ("" for Redis TIME), then the cost.
func SingleArgs(clock any, cost int) []any {
	args := make([]any, lua.SingleArgs)
	args[lua.ArgClock], args[lua.SingleArgCost] = clock, cost
	return args
}

// OverrideWindow sets s, the settings an override is compiled from, to
// window, keeping what gives its algorithm's stored data its shape (its
// Tag), so that the override counts on the key the rule counts on and
// keeps what was spent there: a SlidingCounter keeps its sub-window
// length, and takes a window of 1 to 1000 of them (a window start-up would
// refuse is left to Check, which says why).
func OverrideWindow(s *RateConfig, window time.Duration) error {
	sub := s.Window.Microseconds() / int64(s.SubWindows)
	w, err := CheckWindow(window)
	if err != nil {
		return err
	}
	s.Window = w
	if _, counter := s.Alg.(slidingCounter); !counter || s.Window.Microseconds()%int64(s.SubWindows) != 0 {
		return nil
	}
	n := s.Window.Microseconds() / sub
	if s.Window.Microseconds()%sub != 0 || n > 1000 {
		return fmt.Errorf("Window(%v): an override of a SlidingCounter keeps the rule's sub-window length, %v, so that its count goes on: the window must be 1 to 1000 times that", window, time.Duration(sub)*time.Microsecond)
	}
	s.SubWindows = int(n)
	return nil
}

// MaxWindow is the longest window the scripts accept (1e15 µs, about 31
// years).
const MaxWindow = lua.MaxWindow * time.Microsecond

// CheckWindow checks d as the Window option does, and returns it at the
// scripts' precision, the microsecond.
func CheckWindow(d time.Duration) (time.Duration, error) {
	if d < time.Millisecond || d > MaxWindow {
		return 0, fmt.Errorf("Window(%v): the window must be from 1ms to %v", d, MaxWindow)
	}
	return d.Truncate(time.Microsecond), nil
}

// CheckLimit checks n as the Limit option does.
func CheckLimit(n int) error {
	if n < 1 || n > lua.MaxLimit {
		return fmt.Errorf("Limit(%d): the limit must be between 1 and 1e9", n)
	}
	return nil
}
