package lua

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
	"github.com/redis/go-redis/v9"
)

// onBackends runs f on a fresh miniredis and on a fresh real redis-server
// (skipped when redis-server is missing, unless GINLIMIT_REQUIRE_REDIS=1),
// in parallel. miniredis runs gopher-lua, not Redis's Lua, so only the real
// server proves the scripts run where they are meant to.
func onBackends(t *testing.T, f func(t *testing.T, c *redis.Client)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		// miniredis takes the time for TIME and for the TTLs of PEXPIREAT
		// from the wall clock at each command unless it is set; frozen,
		// TTLs compare exactly.
		m.SetTime(time.Now())
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f(t, c)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.Start(t).Client())
	})
}

// prefix returns a random key prefix, so that no two tests share keys.
func prefix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = crand.Read(b)
	return "lua-test:" + hex.EncodeToString(b) + ":"
}

// startClock returns a test clock in µs a little ahead of the wall clock, so
// that the absolute expiry times the scripts set (PEXPIREAT) are in the
// future on a server that expires keys on its own clock.
func startClock() int64 { return time.Now().Add(time.Second).UnixMicro() }

// rule is one rule's arguments, in the order of ARGV.
type rule struct {
	alg                        int
	window, limit, param, cost int64
}

// args returns ARGV for the rules: the clock (empty, for Redis TIME, when
// clock is negative), then five per rule.
func args(clock int64, rules ...rule) []any {
	a := []any{""}
	if clock >= 0 {
		a[0] = clock
	}
	for _, r := range rules {
		a = append(a, r.alg, r.window, r.limit, r.param, r.cost)
	}
	return a
}

// singleFor returns the single-rule script of r's algorithm (numbered as in
// Algorithms) and settings; its cost is an argument (singleArgs).
func singleFor(r rule) *redis.Script {
	return redis.NewScript(Single(Algorithms()[r.alg], r.window, r.limit, r.param))
}

// singleArgs returns a single-rule script's ARGV: the clock (empty, for
// Redis TIME, when clock is negative), then the cost.
func singleArgs(clock, cost int64) []any {
	if clock < 0 {
		return []any{"", cost}
	}
	return []any{clock, cost}
}

// ints decodes a script reply (see Ints), and fails t if it is anything
// else: it must be the packed string, not an array.
func ints(t *testing.T, reply any) []int64 {
	t.Helper()
	if _, ok := reply.(string); !ok {
		t.Fatalf("reply %#v is not a packed string", reply)
	}
	out, err := Ints(reply)
	if err != nil {
		t.Fatalf("reply %q: %v", reply, err)
	}
	return out
}

// state returns what is stored under key, in a form that compares equal
// exactly when the contents are equal.
func state(ctx context.Context, t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch typ {
	case "none":
		return "none"
	case "zset":
		zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("zset %v", zs)
	case "hash":
		h, err := c.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		fields := make([]string, 0, len(h))
		for k, v := range h {
			fields = append(fields, k+"="+v)
		}
		sort.Strings(fields)
		return "hash " + strings.Join(fields, " ")
	case "string":
		s, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return "string " + s
	}
	t.Fatalf("key %s has unexpected type %s", key, typ)
	return ""
}

// sameTTL reports whether two keys' PTTLs, taken in one transaction just
// after scripts set them, agree: both missing, both without a TTL, or both
// set, and a little apart at most. A real server can be descheduled between
// the commands of a transaction, and takes relative TTLs from its own clock.
func sameTTL(a, b time.Duration) bool {
	if a < 0 || b < 0 {
		return a == b
	}
	return a-b < 100*time.Millisecond && b-a < 100*time.Millisecond
}

// number returns the number of the algorithm named name in Numbered().
func number(t *testing.T, name string) int {
	t.Helper()
	i := slices.Index(Numbered(), name)
	if i < 0 {
		t.Fatalf("no algorithm %q", name)
	}
	return i
}

func reversed(s []string) []string {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

func TestAlgorithms(t *testing.T) {
	t.Parallel()
	want := []string{"sliding_log", "sliding_counter", "fixed_window", "token_bucket"}
	if got := Algorithms(); !slices.Equal(got, want) {
		t.Fatalf("Algorithms() = %v, want %v", got, want)
	}
	Algorithms()[0] = "changed"
	if got := Algorithms(); !slices.Equal(got, want) {
		t.Fatalf("Algorithms() after changing a returned slice = %v, want %v", got, want)
	}
	numbered := append(slices.Clone(want), "penalty")
	if got := Numbered(); !slices.Equal(got, numbered) {
		t.Fatalf("Numbered() = %v, want %v", got, numbered)
	}
	for _, name := range want {
		src := Single(name, 1234567, 89, 10)
		if !strings.Contains(src, "local window, limit, param, settings_bad = 1234567, 89, 10, false\n") {
			t.Errorf("Single(%q) does not carry its settings", name)
		}
		if strings.Contains(src, "@WINDOW@") || strings.Contains(src, "@LIMIT@") || strings.Contains(src, "@PARAM@") || strings.Contains(src, "@SETTINGS_BAD@") {
			t.Errorf("Single(%q) keeps a placeholder", name)
		}
		if !strings.Contains(src, "local alg_name = '"+name+"'") {
			t.Errorf("Single(%q) does not name its algorithm", name)
		}
	}
	if src := Single("token_bucket", 999, 1, 1); !strings.Contains(src, "= 999, 1, 1, true\n") {
		t.Errorf("Single with a window out of range does not say its settings are bad")
	}
}

func TestUnknownNamesPanic(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"Single unknown":  func() { Single("leaky_bucket", 1e6, 10, 0) },
		"Single empty":    func() { Single("", 1e6, 10, 0) },
		"Single prologue": func() { Single("prologue", 1e6, 10, 0) },
		"Single penalty":  func() { Single("penalty", 1e6, 10, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		})
	}
}

// equivConfig is a rule to run a random sequence of requests under.
type equivConfig struct {
	name                 string
	window, limit, param int64
}

var equivConfigs = []equivConfig{
	{"sliding_log", 1e6, 10, 0},
	{"sliding_log", 2e6, 20, 64},
	{"sliding_log", 1e6, 6, 3},
	{"sliding_counter", 1e6, 10, 10},
	{"sliding_counter", 2e6, 20, 4},
	{"sliding_counter", 1e6, 7, 1},
	{"fixed_window", 1e6, 10, 0},
	{"fixed_window", 1500e3, 4, 0},
	{"token_bucket", 1e6, 10, 5},
	{"token_bucket", 2e6, 3, 10},
	{"token_bucket", 1e6, 10, 1},
}

// TestSingleMatchesSeveral runs the same seeded random sequence of requests
// (random gaps, including none, and random costs) through Single and
// through two Several scripts with different numberings, each on its own
// key, in one transaction per step so that all three run at the same
// moment: the committed several.lua, and one the generator numbers in
// reverse (severalNumbered), which shows that a rule's algorithm follows
// its number whatever the numbering. Their replies, stored state and TTLs must agree at every step.
// Each step also PERSISTs the keys, so that a real server, which expires
// keys on its own clock, never expires state that the test clock still
// counts.
func TestSingleMatchesSeveral(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		all := Numbered()
		severalA := redis.NewScript(Several())
		severalB := redis.NewScript(severalNumbered(t, reversed(all)...))
		for _, s := range []*redis.Script{severalA, severalB} {
			if err := s.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for ci, cfg := range equivConfigs {
			single := redis.NewScript(Single(cfg.name, cfg.window, cfg.limit, cfg.param))
			if err := single.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
			numA := number(t, cfg.name)
			numB := len(all) - 1 - numA
			maxCost := cfg.limit
			if cfg.name == "token_bucket" {
				maxCost = cfg.param
			}
			p := prefix(t)
			keys := []string{p + "single", p + "severalA", p + "severalB"}
			rng := rand.New(rand.NewPCG(uint64(ci), 42))
			clock := startClock()
			var admitted, rejected int
			for step := range 400 {
				switch r := rng.IntN(20); {
				case r < 5: // the same microsecond
				case r < 10:
					clock += rng.Int64N(cfg.window/cfg.limit/2 + 1)
				case r < 18:
					clock += rng.Int64N(2 * cfg.window / cfg.limit)
				default:
					clock += rng.Int64N(cfg.window * 3 / 2)
				}
				cost := int64(1)
				if rng.IntN(3) == 0 {
					cost = 1 + rng.Int64N(min(maxCost, 4))
				}
				r := rule{window: cfg.window, limit: cfg.limit, param: cfg.param, cost: cost}
				ra, rb := r, r
				ra.alg, rb.alg = numA, numB
				var cmds [3]*redis.Cmd
				var ttls [3]*redis.DurationCmd
				_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					for i, run := range []struct {
						s    *redis.Script
						argv []any
					}{{single, singleArgs(clock, cost)}, {severalA, args(clock, ra)}, {severalB, args(clock, rb)}} {
						cmds[i] = run.s.EvalSha(ctx, pipe, keys[i:i+1], run.argv...)
						ttls[i] = pipe.PTTL(ctx, keys[i])
						pipe.Persist(ctx, keys[i])
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%v step %d: %v", cfg, step, err)
				}
				got := ints(t, cmds[0].Val())
				if len(got) != 6 {
					t.Fatalf("%v step %d: Single replied %v, want 6 integers", cfg, step, got)
				}
				if got[0] != clock {
					t.Fatalf("%v step %d: now_us = %d, want the test clock %d", cfg, step, got[0], clock)
				}
				if (got[1] == 0) != (got[2] == 1) || got[1] < 0 || got[1] > 1 {
					t.Fatalf("%v step %d: fired %d and ok %d disagree", cfg, step, got[1], got[2])
				}
				if got[1] == 0 {
					admitted++
				} else {
					rejected++
				}
				want := state(ctx, t, c, keys[0])
				for i := 1; i < 3; i++ {
					if other := ints(t, cmds[i].Val()); !slices.Equal(other, got) {
						t.Fatalf("%v step %d (clock %d, cost %d): Several %c replied %v, Single %v", cfg, step, clock, cost, 'A'+i-1, other, got)
					}
					if s := state(ctx, t, c, keys[i]); s != want {
						t.Fatalf("%v step %d: Several %c stored\n%s\nSingle stored\n%s", cfg, step, 'A'+i-1, s, want)
					}
					if !sameTTL(ttls[i].Val(), ttls[0].Val()) {
						t.Fatalf("%v step %d: Several %c left a TTL of %v, Single %v", cfg, step, 'A'+i-1, ttls[i].Val(), ttls[0].Val())
					}
				}
			}
			if admitted < 20 || rejected < 20 {
				t.Errorf("%v: %d admitted and %d rejected: the sequence does not exercise both", cfg, admitted, rejected)
			}
		}
	})
}

// TestSeveralAllOrNothing: when rule 2 rejects, rule 1, whatever its
// algorithm, records nothing; when both admit, both record.
func TestSeveralAllOrNothing(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		script := redis.NewScript(Several())
		fixed := number(t, "fixed_window")
		for _, name := range Algorithms() {
			p := prefix(t)
			keys := []string{p + "one", p + "two"}
			clock := startClock()
			clock += 10e6 - clock%10e6 // the start of a fixed window of rule 2
			// Rule 1 has room for every request here; rule 2 admits 2 units
			// per window. Params leave the log inexact (exact-below 1), so its
			// check does not sweep on the admitted calls.
			r1 := rule{alg: number(t, name), window: 10e6, limit: 100, param: 1, cost: 1}
			switch name {
			case "sliding_counter":
				r1.param = 10
			case "token_bucket":
				r1.param = 100
			}
			r2 := rule{alg: fixed, window: 10e6, limit: 2, cost: 1}
			run := func(clock int64, wantFired int64) []int64 {
				t.Helper()
				got := ints(t, script.Run(ctx, c, keys, args(clock, r1, r2)...).Val())
				if len(got) != 10 {
					t.Fatalf("%s: reply %v, want 10 integers", name, got)
				}
				if got[1] != wantFired {
					t.Fatalf("%s: fired = %d, want %d (reply %v)", name, got[1], wantFired, got)
				}
				return got
			}
			for range 2 {
				clock += 3
				before := state(ctx, t, c, keys[0])
				run(clock, 0)
				if state(ctx, t, c, keys[0]) == before {
					t.Fatalf("%s: an admitted request left rule 1's state unchanged", name)
				}
			}
			before1, before2 := state(ctx, t, c, keys[0]), state(ctx, t, c, keys[1])
			for range 3 {
				clock += 3
				got := run(clock, 2)
				if got[2] != 1 || got[5] != 0 {
					t.Fatalf("%s: rule 1 has room: want ok 1 and retry 0, got %v", name, got[2:6])
				}
				if got[6] != 0 || got[9] <= 0 {
					t.Fatalf("%s: rule 2 is full: want ok 0 and a retry, got %v", name, got[6:10])
				}
				if got[3] != 100-2 {
					t.Fatalf("%s: rule 1 remaining = %d, want 98 (reply %v)", name, got[3], got)
				}
				if s := state(ctx, t, c, keys[0]); s != before1 {
					t.Fatalf("%s: a request rule 2 rejected changed rule 1's state from\n%s\nto\n%s", name, before1, s)
				}
				if s := state(ctx, t, c, keys[1]); s != before2 {
					t.Fatalf("%s: a rejected request changed rule 2's state from\n%s\nto\n%s", name, before2, s)
				}
			}
			// Rule 1 rejecting comes first in fired even when rule 2 rejects
			// too.
			big := r1
			big.cost = 100
			got := ints(t, script.Run(ctx, c, keys, args(clock+1, big, r2)...).Val())
			if got[1] != 1 || got[2] != 0 || got[6] != 0 || got[5] <= 0 {
				t.Fatalf("%s: both rules reject: want fired 1, both not ok, retry for rule 1; got %v", name, got)
			}
			if s := state(ctx, t, c, keys[0]); s != before1 {
				t.Fatalf("%s: a rejected request changed rule 1's state", name)
			}
		}
	})
}

// TestSeveralLogReportsExactly: a sliding-log rule that would admit a
// request another rule rejects reports its exact remaining and reset (an
// entry that has left the window counts for nothing), and writes nothing.
func TestSeveralLogReportsExactly(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		script := redis.NewScript(Several())
		p := prefix(t)
		keys := []string{p + "log", p + "fixed"}
		clock := startClock()
		clock -= clock % 1000 // on a millisecond, where the log keeps its times
		const window = 1e6
		logRule := rule{alg: number(t, "sliding_log"), window: window, limit: 100, param: 10, cost: 1}
		fixed := rule{alg: number(t, "fixed_window"), window: 100e6, limit: 1, cost: 1}
		// An entry that will have left the window, then one that stays.
		old, kept := clock, clock+window/2
		for _, at := range []int64{old, kept} {
			if got := ints(t, script.Run(ctx, c, keys[:1], args(at, logRule)...).Val()); got[1] != 0 {
				t.Fatalf("admitting at %d: %v", at, got)
			}
		}
		now := old + window + 2 // old has left
		// Fill the fixed window's one unit, so that it rejects.
		if got := ints(t, script.Run(ctx, c, keys[1:], args(now, fixed)...).Val()); got[1] != 0 {
			t.Fatalf("filling the fixed window: %v", got)
		}
		before := c.Get(ctx, keys[0]).Val()
		got := ints(t, script.Run(ctx, c, keys, args(now, logRule, fixed)...).Val())
		if got[1] != 2 {
			t.Fatalf("fired = %d, want 2 (reply %v)", got[1], got)
		}
		if want := []int64{1, 100 - 1, kept + window - now, 0}; !slices.Equal(got[2:6], want) {
			t.Fatalf("log rule reported %v, want exact %v (ok, remaining, reset, retry)", got[2:6], want)
		}
		if after := c.Get(ctx, keys[0]).Val(); after != before {
			t.Fatalf("a rejected request changed the log: %q, then %q", before, after)
		}
	})
}

// TestReplyLayout: 2 + 4n integers for n rules, and the Redis clock when
// ARGV[1] is empty.
func TestReplyLayout(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		all := Algorithms()
		script := redis.NewScript(Several())
		rules := []rule{
			{alg: number(t, "sliding_log"), window: 1e6, limit: 5, param: 64, cost: 1},
			{alg: number(t, "sliding_counter"), window: 1e6, limit: 5, param: 10, cost: 2},
			{alg: number(t, "fixed_window"), window: 1e6, limit: 5, param: 0, cost: 1},
			{alg: number(t, "token_bucket"), window: 1e6, limit: 5, param: 5, cost: 3},
			{alg: number(t, "fixed_window"), window: 2e6, limit: 5, param: 0, cost: 1},
		}
		for n := 1; n <= len(rules); n++ {
			p := prefix(t)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = p + strconv.Itoa(i)
			}
			before := time.Now().UnixMicro()
			got := ints(t, script.Run(ctx, c, keys, args(-1, rules[:n]...)...).Val())
			after := time.Now().UnixMicro()
			if len(got) != 2+4*n {
				t.Fatalf("%d rules: reply %v has %d integers, want %d", n, got, len(got), 2+4*n)
			}
			if got[0] < before-5e6 || got[0] > after+5e6 {
				t.Fatalf("%d rules: now_us %d is not the Redis clock (wall clock %d)", n, got[0], before)
			}
			if got[1] != 0 {
				t.Fatalf("%d rules: the first request was rejected: %v", n, got)
			}
			for i := range n {
				if got[2+4*i] != 1 || got[3+4*i] != rules[i].limit-rules[i].cost || got[5+4*i] != 0 {
					t.Fatalf("%d rules: rule %d reported %v, want ok 1, remaining %d, retry 0", n, i+1, got[2+4*i:6+4*i], rules[i].limit-rules[i].cost)
				}
			}
		}
		for i, name := range all {
			p := prefix(t)
			r := rules[i]
			got := ints(t, redis.NewScript(Single(name, r.window, r.limit, r.param)).Run(ctx, c, []string{p + name}, singleArgs(-1, r.cost)...).Val())
			if len(got) != 6 || got[1] != 0 || got[2] != 1 || got[3] != r.limit-r.cost || got[5] != 0 {
				t.Fatalf("Single(%s): reply %v, want 6 integers: now, fired 0, ok 1, remaining %d, reset, retry 0", name, got, r.limit-r.cost)
			}
		}
	})
}

// TestArgumentErrors: every bad argument is an error reply that names it,
// and touches no key.
func TestArgumentErrors(t *testing.T) {
	t.Parallel()
	num := func(name string) int { return number(t, name) }
	good := map[string]rule{
		"sliding_log":     {alg: num("sliding_log"), window: 1e6, limit: 10, param: 64, cost: 1},
		"sliding_counter": {alg: num("sliding_counter"), window: 1e6, limit: 10, param: 10, cost: 1},
		"fixed_window":    {alg: num("fixed_window"), window: 1e6, limit: 10, param: 0, cost: 1},
		"token_bucket":    {alg: num("token_bucket"), window: 1e6, limit: 10, param: 5, cost: 1},
	}
	with := func(name string, f func(*rule)) rule {
		r := good[name]
		f(&r)
		return r
	}
	type tc struct {
		what string
		alg  string // for Single, built with r's settings; "" means Several()
		r    rule
		keys int
		argv []any
		want string // a part of the error message
	}
	clock := startClock()
	var cases []tc
	for name, r := range good {
		one := func(what string, keys int, argv []any, want string) tc {
			return tc{name + " " + what, name, r, keys, argv, want}
		}
		built := func(what string, f func(*rule), want string) tc {
			return tc{name + " " + what, name, with(name, f), 1, singleArgs(clock, 1), want}
		}
		cases = append(cases,
			one("no arguments", 1, nil, "takes 1 key and 2 arguments"),
			one("one argument short", 1, []any{clock}, "takes 1 key and 2 arguments"),
			one("one argument over", 1, []any{clock, 1, 1}, "takes 1 key and 2 arguments"),
			one("the several-rule layout", 1, args(clock, r), "takes 1 key and 2 arguments"),
			one("two keys", 2, singleArgs(clock, 1), "takes 1 key and 2 arguments"),
			one("no keys", 0, singleArgs(clock, 1), "takes 1 key and 2 arguments"),
			one("bad clock", 1, []any{"soon", 1}, "test clock (ARGV[1])"),
			one("negative clock", 1, []any{-1, 1}, "test clock (ARGV[1])"),
			one("fractional clock", 1, []any{"1.5", 1}, "test clock (ARGV[1])"),
			one("cost 0", 1, singleArgs(clock, 0), "cost (ARGV[2]) must be an integer from 1 to 1e9"),
			one("empty cost", 1, []any{clock, ""}, "cost (ARGV[2])"),
			one("fractional cost", 1, []any{clock, "1.5"}, "cost (ARGV[2])"),
			one("cost not a number", 1, []any{clock, "one"}, "cost (ARGV[2])"),
			built("window too short", func(r *rule) { r.window = 999 }, "script's window (999) must be an integer number of microseconds"),
			built("window too long", func(r *rule) { r.window = 1e15 + 1 }, "script's window (1000000000000001) must be"),
			built("limit 0", func(r *rule) { r.limit = 0 }, "script's limit (0) must be"),
			built("limit too high", func(r *rule) { r.limit = 1e9 + 1 }, "script's limit (1000000001) must be"),
			built("negative param", func(r *rule) { r.param = -1 }, "script's param (-1) must be"),
		)
	}
	over := func(name string, f func(*rule)) []any { return singleArgs(clock, with(name, f).cost) }
	cases = append(cases,
		tc{"log cost over the limit", "sliding_log", good["sliding_log"], 1, over("sliding_log", func(r *rule) { r.cost = 11 }), "cost must be at most the limit"},
		tc{"counter cost over the limit", "sliding_counter", good["sliding_counter"], 1, over("sliding_counter", func(r *rule) { r.cost = 11 }), "cost must be at most the limit"},
		tc{"fixed cost over the limit", "fixed_window", good["fixed_window"], 1, over("fixed_window", func(r *rule) { r.cost = 11 }), "cost must be at most the limit"},
		tc{"bucket cost over the burst", "token_bucket", good["token_bucket"], 1, over("token_bucket", func(r *rule) { r.cost = 6 }), "cost must be at most the burst"},
		tc{"counter sub-windows 0", "sliding_counter", with("sliding_counter", func(r *rule) { r.param = 0 }), 1, singleArgs(clock, 1), "sub-windows (param)"},
		tc{"counter sub-windows over 1000", "sliding_counter", with("sliding_counter", func(r *rule) { r.window, r.param = 2002000, 1001 }), 1, singleArgs(clock, 1), "sub-windows (param)"},
		tc{"counter sub-windows not dividing", "sliding_counter", with("sliding_counter", func(r *rule) { r.param = 7 }), 1, singleArgs(clock, 1), "sub-windows (param)"},
		tc{"bucket burst 0", "token_bucket", with("token_bucket", func(r *rule) { r.param = 0 }), 1, singleArgs(clock, 1), "burst (param) must be at least 1"},
		tc{"bucket burst * window over 2^53", "token_bucket", with("token_bucket", func(r *rule) { r.param, r.window = 1e6, 1e10 }), 1, singleArgs(clock, 1), "2^53"},
		// Several: the same checks, naming the rule.
		tc{what: "several no keys", keys: 0, argv: []any{clock}, want: "want 1 + 5*#KEYS arguments"},
		tc{what: "several short", keys: 2, argv: args(clock, good["sliding_log"], good["fixed_window"])[:10], want: "want 1 + 5*#KEYS arguments"},
		tc{what: "several keys without arguments", keys: 2, argv: args(clock, good["sliding_log"]), want: "want 1 + 5*#KEYS arguments"},
		tc{what: "several unknown algorithm", keys: 2, argv: args(clock, good["sliding_log"], with("fixed_window", func(r *rule) { r.alg = 5 })), want: "rule 2: algorithm (ARGV[7]) must be one of 0 (sliding_log), 1 (sliding_counter), 2 (fixed_window), 3 (token_bucket), 4 (penalty), got 5"},
		tc{what: "several negative algorithm", keys: 1, argv: args(clock, with("fixed_window", func(r *rule) { r.alg = -1 })), want: "rule 1: algorithm (ARGV[2])"},
		tc{what: "several bad window", keys: 2, argv: args(clock, good["sliding_log"], with("fixed_window", func(r *rule) { r.window = 10 })), want: "rule 2: window (ARGV[8])"},
		tc{what: "several bad limit", keys: 2, argv: args(clock, good["sliding_log"], with("fixed_window", func(r *rule) { r.limit = 0 })), want: "rule 2: limit (ARGV[9])"},
		tc{what: "several bad param", keys: 2, argv: args(clock, good["sliding_log"], with("fixed_window", func(r *rule) { r.param = 2e9 })), want: "rule 2: param (ARGV[10])"},
		tc{what: "several bad cost", keys: 2, argv: args(clock, good["sliding_log"], with("fixed_window", func(r *rule) { r.cost = 0 })), want: "rule 2: cost (ARGV[11])"},
		tc{what: "several cost over the limit", keys: 2, argv: args(clock, with("sliding_log", func(r *rule) { r.cost = 11 }), good["fixed_window"]), want: "rule 1: cost must be at most the limit"},
		tc{what: "several cost over the burst", keys: 2, argv: args(clock, good["fixed_window"], with("token_bucket", func(r *rule) { r.cost = 6 })), want: "rule 2: cost must be at most the burst"},
		tc{what: "several sub-windows", keys: 2, argv: args(clock, good["fixed_window"], with("sliding_counter", func(r *rule) { r.param = 3 })), want: "rule 2: sub-windows (param)"},
		tc{what: "several burst", keys: 1, argv: args(clock, with("token_bucket", func(r *rule) { r.param = 0 })), want: "rule 1: burst (param)"},
		tc{what: "several bad clock", keys: 1, argv: append([]any{"x"}, args(clock, good["fixed_window"])[1:]...), want: "test clock (ARGV[1])"},
	)
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		several := Several()
		for _, tc := range cases {
			src := several
			if tc.alg != "" {
				src = Single(tc.alg, tc.r.window, tc.r.limit, tc.r.param)
			}
			p := prefix(t)
			keys := make([]string, tc.keys)
			for i := range keys {
				keys[i] = p + strconv.Itoa(i)
			}
			// A wrong layout must not half-run on the wrong key either.
			err := redis.NewScript(src).Run(ctx, c, keys, tc.argv...).Err()
			if err == nil {
				t.Errorf("%s: no error", tc.what)
				continue
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "ERR ginlimit: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("%s: error %q, want one starting \"ERR ginlimit: \" that contains %q", tc.what, msg, tc.want)
			}
			if len(keys) > 0 {
				if n := c.Exists(ctx, keys...).Val(); n != 0 {
					t.Errorf("%s: the failed call created %d keys", tc.what, n)
				}
			}
		}
	})
}

// TestPeekRecordsNothing runs one seeded random sequence of requests on two
// keys at once, with a Peek before each request on the first key only. The
// requests must get identical replies on both keys (a Peek changes no
// decision); a Peek must say the request would be rejected exactly when it
// is, give a rejected request's own reply, and for an admitted one report
// at least the cost more remaining than the admission leaves.
func TestPeekRecordsNothing(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		peek := redis.NewScript(Peek())
		several := redis.NewScript(Several())
		for _, s := range []*redis.Script{peek, several} {
			if err := s.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for ci, cfg := range equivConfigs {
			maxCost, most := cfg.limit, cfg.limit // most: the most a key can have remaining
			if cfg.name == "token_bucket" {
				maxCost, most = cfg.param, cfg.param
			}
			p := prefix(t)
			peeked, plain := p+"peeked", p+"plain"
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			clock := startClock()
			var admitted, rejected int
			for step := range 300 {
				clock += rng.Int64N(2 * cfg.window / cfg.limit)
				cost := int64(1)
				if rng.IntN(3) == 0 {
					cost = 1 + rng.Int64N(min(maxCost, 4))
				}
				r := rule{alg: number(t, cfg.name), window: cfg.window, limit: cfg.limit, param: cfg.param, cost: cost}
				var look, onPeeked, onPlain *redis.Cmd
				_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					look = peek.EvalSha(ctx, pipe, []string{peeked}, args(clock, r)...)
					onPeeked = several.EvalSha(ctx, pipe, []string{peeked}, args(clock, r)...)
					onPlain = several.EvalSha(ctx, pipe, []string{plain}, args(clock, r)...)
					pipe.Persist(ctx, peeked)
					pipe.Persist(ctx, plain)
					return nil
				})
				if err != nil {
					t.Fatalf("%v step %d: %v", cfg, step, err)
				}
				l, a, b := ints(t, look.Val()), ints(t, onPeeked.Val()), ints(t, onPlain.Val())
				if !slices.Equal(a, b) {
					t.Fatalf("%v step %d: after a Peek the request got %v, without one %v", cfg, step, a, b)
				}
				if len(l) != 6 || l[0] != clock || l[1] != a[1] || l[2] != a[2] {
					t.Fatalf("%v step %d (cost %d): Peek %v does not foretell the decision %v", cfg, step, cost, l, a)
				}
				if a[1] != 0 {
					rejected++
					if !slices.Equal(l, a) {
						t.Fatalf("%v step %d: Peek %v, the rejected request's reply %v", cfg, step, l, a)
					}
					continue
				}
				admitted++
				if l[3] > most || l[3]-cost < a[3] || l[5] != 0 {
					t.Fatalf("%v step %d (cost %d): Peek says remaining %d retry %d, the admission left %d", cfg, step, cost, l[3], l[5], a[3])
				}
			}
			if admitted < 20 || rejected < 20 {
				t.Errorf("%v: %d admitted and %d rejected: the sequence does not exercise both", cfg, admitted, rejected)
			}
		}
	})
}

// TestPack: pack and unpack_ints (prologue.lua) give the bytes of
// struct.pack's big-endian formats and read them back, both where they are
// Redis's struct library and where prologue.lua writes them out
// (miniredis).
func TestPack(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		src := "local ARG_CLOCK = 1\n" + prologue + `
local a, b, c, p = unpack_ints('>I7I7I4', pack('>I7I7I4', 1795418952522849, 4503599627370495, 4294967295))
local d, q = unpack_ints('>I4', pack('>I7I7I4I4', 1, 2, 3, 123456789), 19)
local e, f, g, h, r = unpack_ints('>I7I2I4I4', pack('>I7I2I4I4', 17954189525228, 999, 1000000000, 65536))
return {pack('>i8i8i8i8', -1, -4294967297, 9007199254740992, 0),
  pack('>I7I7I4I4', 1795418952522849, 4503599627370495, 4294967295, 7), a, b, c, p, d, q,
  pack('>I2I1I3', 65535, 255, 16777215), e, f, g, h, r}`
		reply, err := redis.NewScript(src).Run(context.Background(), c, []string{prefix(t)}, "", 0, 1000, 1, 0, 1).Slice()
		if err != nil {
			t.Fatal(err)
		}
		be := func(size int, v int64) string {
			b := make([]byte, size)
			for i := size - 1; i >= 0; i-- {
				b[i] = byte(v)
				v >>= 8
			}
			return string(b)
		}
		want := []any{
			be(8, -1) + be(8, -4294967297) + be(8, 1<<53) + be(8, 0),
			be(7, 1795418952522849) + be(7, 4503599627370495) + be(4, 4294967295) + be(4, 7),
			int64(1795418952522849), int64(4503599627370495), int64(4294967295), int64(19), int64(123456789), int64(23),
			be(2, 65535) + be(1, 255) + be(3, 16777215),
			int64(17954189525228), int64(999), int64(1000000000), int64(65536), int64(18),
		}
		if fmt.Sprintf("%q", reply) != fmt.Sprintf("%q", want) {
			t.Errorf("got %q\nwant %q", reply, want)
		}
		got, err := Ints(reply[0])
		if err != nil || !slices.Equal(got, []int64{-1, -4294967297, 1 << 53, 0}) {
			t.Errorf("Ints(%q) = %v, %v", reply[0], got, err)
		}
	})
}
