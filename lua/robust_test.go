package lua

// Every algorithm under two hostile conditions: Redis out of memory, and
// its clock stepping back.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// robustRule is a rule of each algorithm with a limit of limit per window,
// its param chosen so that a cost of 1 is a tenth of the limit per
// sub-window or token.
func robustRule(t *testing.T, name string, window, limit int64) rule {
	r := rule{alg: number(t, name), window: window, limit: limit, cost: 1}
	switch name {
	case "sliding_log":
		r.param = 64
	case "sliding_counter":
		r.param = 10
	case "token_bucket":
		r.param = limit
	}
	return r
}

// TestOOMRefusedBeforeAnyWrite: with maxmemory 1mb, noeviction and memory
// full, an admitting call of every algorithm, from the single-rule and the
// several-rule script, on a new key, on one holding data that has left
// the window (which a check that swept would delete first: a write Redis
// does not check, after which it checks no other write of the call), and
// on one with room left now (the counter writes it in place), gets
// Redis's OOM error and writes nothing; a call that rejects (a full key)
// answers as usual. Redis checks a script against maxmemory only at its
// first write, and only if that command is one that can grow memory.
func TestOOMRefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const window, limit = 10e6, 3
	names := Algorithms()
	several := redis.NewScript(Several())
	singles := map[string]*redis.Script{}
	for _, name := range names {
		singles[name] = singleFor(robustRule(t, name, window, limit))
	}
	p := prefix(t)
	key := func(what, name string) string { return p + what + ":" + name }
	clock := startClock() + 60e6
	now := clock + window + 1e6 // what clock admitted has left the window
	run := func(s *redis.Script, keys []string, at int64, rules ...rule) ([]int64, error) {
		argv := args(at, rules...)
		if s != several {
			argv = singleArgs(at, rules[0].cost) // a single-rule script: its settings are in it
		}
		reply, err := s.Run(ctx, c, keys, argv...).Result()
		if err != nil {
			return nil, err
		}
		return ints(t, reply), nil
	}
	// Before memory is full: "old" keys hold an admission a window ago,
	// "room" keys one now, and "full" keys are at their limit now.
	for _, name := range names {
		r := robustRule(t, name, window, limit)
		if _, err := run(singles[name], []string{key("old", name)}, clock, r); err != nil {
			t.Fatal(err)
		}
		if got, err := run(singles[name], []string{key("room", name)}, now, r); err != nil || got[1] != 0 {
			t.Fatalf("%s: room: %v, %v", name, got, err)
		}
		for range limit {
			if got, err := run(singles[name], []string{key("full", name)}, now, r); err != nil || got[1] != 0 {
				t.Fatalf("%s: filling: %v, %v", name, got, err)
			}
		}
	}
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1mb"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = c.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	for i := 0; ; i++ {
		err := c.Set(ctx, fmt.Sprintf("%sfill:%d", p, i), strings.Repeat("x", 64<<10), 0).Err()
		if err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatal(err)
			}
			break
		}
		if i == 1000 {
			t.Fatal("64 MB written under maxmemory 1mb and no OOM error")
		}
	}
	// snapshot returns the number of keys and what every test key holds.
	snapshot := func() (int64, map[string]string) {
		states := map[string]string{}
		for _, what := range []string{"old", "new", "room", "full"} {
			for _, name := range names {
				states[key(what, name)] = state(ctx, t, c, key(what, name))
			}
		}
		return c.DBSize(ctx).Val(), states
	}
	size, before := snapshot()
	wantOOM := func(what string, got []int64, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), "OOM command not allowed") {
			t.Errorf("%s at maxmemory: reply %v, error %v; want Redis's OOM error", what, got, err)
		}
	}
	var allRules []rule
	for _, what := range []string{"new", "old", "room"} {
		var keys []string
		for _, name := range names {
			r := robustRule(t, name, window, limit)
			got, err := run(singles[name], []string{key(what, name)}, now, r)
			wantOOM(fmt.Sprintf("%s, single, %s key", name, what), got, err)
			// The rule alone in the several-rule script.
			got, err = run(several, []string{key(what, name)}, now, r)
			wantOOM(fmt.Sprintf("%s, several, %s key", name, what), got, err)
			keys = append(keys, key(what, name))
			if what == "new" {
				allRules = append(allRules, r)
			}
		}
		got, err := run(several, keys, now, allRules...)
		wantOOM(fmt.Sprintf("every algorithm, several, %s keys", what), got, err)
	}
	if n, after := snapshot(); n != size || !maps.Equal(after, before) {
		t.Errorf("the scripts wrote at maxmemory: %d keys, was %d; before %v, after %v", n, size, before, after)
	}
	// Rejections answer: each full key alone, and all of them with the
	// admitting old keys before them (whose data that has left the window
	// the rejection may delete: that only frees memory).
	var keys []string
	for _, name := range names {
		r := robustRule(t, name, window, limit)
		got, err := run(singles[name], []string{key("full", name)}, now, r)
		if err != nil || got[1] != 1 {
			t.Errorf("%s: a rejection at maxmemory: reply %v, error %v; want fired 1", name, got, err)
		}
		keys = append(keys, key("old", name))
	}
	for _, name := range names {
		keys = append(keys, key("full", name))
	}
	got, err := run(several, keys, now, append(slices.Clone(allRules), allRules...)...)
	if err != nil || got[1] != int64(len(names))+1 {
		t.Errorf("several rules, the full ones rejecting, at maxmemory: reply %v, error %v; want fired %d", got, err, len(names)+1)
	}
	n, after := snapshot()
	for _, name := range names {
		if k := key("full", name); after[k] != before[k] {
			t.Errorf("%s: a rejection at maxmemory changed the full key from %s to %s", name, before[k], after[k])
		}
	}
	if n > size {
		t.Errorf("rejections at maxmemory: %d keys, was %d", n, size)
	}
}

// TestClockStepsBack: for every algorithm, with the limit admitted at c0,
// when the clock steps back 30 s nothing more is admitted until the moment
// the window would have allowed it without the step (E), and each rejection
// says so: now + retry = E.
func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		const window, limit = 60e6, 10
		// 10 s into a window, two minutes ahead of the wall clock (the
		// counter and the fixed window expire keys at absolute times).
		c0 := startClock() + 120e6
		c0 += 10e6 - c0%window
		for _, name := range Algorithms() {
			t.Run(name, func(t *testing.T) {
				r := robustRule(t, name, window, limit)
				script := singleFor(r)
				key := prefix(t) + name
				run := func(at, cost int64) []int64 {
					t.Helper()
					return ints(t, script.Run(ctx, c, []string{key}, singleArgs(at, cost)...).Val())
				}
				for i := range limit {
					if got := run(c0, 1); got[1] != 0 {
						t.Fatalf("%s: admission %d: %v", name, i, got)
					}
				}
				var e int64
				switch name {
				case "sliding_log":
					e = c0 + window // the entries leave
				case "sliding_counter":
					sub := int64(window) / r.param
					e = (c0/sub + r.param) * sub // c0's sub-window leaves the count
				case "fixed_window":
					e = c0 - c0%window + window // the window ends
				case "token_bucket":
					e = c0 + window/limit // a token is back
				}
				for _, at := range []int64{c0 - 30e6, c0 - 30e6 + 1, c0 - 1, c0, e - 1} {
					got := run(at, 1)
					if got[1] != 1 || got[5] != e-at {
						t.Fatalf("%s: at c0%+dµs, after the clock stepped back 30 s: reply %v; want rejected with retry %d (until c0%+dµs)", name, at-c0, got, e-at, e-c0)
					}
				}
				if got := run(e, 1); got[1] != 0 {
					t.Fatalf("%s: at c0%+dµs, when the window allows it again: reply %v; want admitted", name, e-c0, got)
				}
			})
		}
	})
}
