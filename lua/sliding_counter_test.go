package lua

// Tests of the sliding counter: its stored string (as sliding_counter.lua
// documents it), a reference model over random timelines on which the
// clock steps back and the number of sub-windows changes, and its memory.

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// counterState is what a sliding-counter key holds: the newest sub-window
// holding units (L), L minus the oldest one holding units (d), the total
// and the counts of sub-windows L, L-1, ..., L-N+1.
type counterState struct {
	last, d, total int64
	counts         []int64
}

func decodeCounter(s string) (counterState, error) {
	if len(s) < 17 || (len(s)-13)%4 != 0 {
		return counterState{}, fmt.Errorf("counter state %q: %d bytes, want 13 + 4N", s, len(s))
	}
	st := counterState{last: bigEndian(s[0:7]), d: bigEndian(s[7:9]), total: bigEndian(s[9:13])}
	for p := 13; p < len(s); p += 4 {
		st.counts = append(st.counts, bigEndian(s[p:p+4]))
	}
	return st, nil
}

// counterModel is sliding_counter.lua's documented behaviour, clock steps
// back included: units per sub-window index, as the key holds them. Only
// an admission rewrites the key, keeping the counted sub-windows; a
// rejection writes nothing, so after the clock steps back, units that had
// stopped counting may count again.
type counterModel map[int64]int64

// decide returns fired, ok, remaining, reset and retry, and records an
// admission.
func (m counterModel) decide(now, window, limit, n, cost int64) []int64 {
	sub := window / n
	cur := now / sub
	var sum, last int64
	last = cur
	for i, u := range m {
		if i >= cur-n+1 {
			sum += u
			last = max(last, i)
		}
	}
	ok := sum+cost <= limit
	if ok {
		for i := range m {
			if i < cur-n+1 {
				delete(m, i)
			}
		}
		// Recorded in the current sub-window, or the oldest the newest
		// keeps; anything older (after N shrank) is kept there too.
		oldest := last - n + 1
		for i, u := range m {
			if i < oldest {
				delete(m, i)
				m[oldest] += u
			}
		}
		m[max(cur, oldest)] += cost
		sum += cost
	}
	var idx []int64
	for i := range m {
		if i >= cur-n+1 {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	reset, retry := (cur+1)*sub-now, int64(0)
	need, freed := sum+cost-limit, int64(0)
	for k, i := range idx {
		leaves := (i+n)*sub - now
		if k == 0 {
			reset = leaves
		}
		freed += m[i]
		if !ok && retry == 0 && freed >= need {
			retry = leaves
		}
	}
	fired, okInt := int64(1), int64(0)
	if ok {
		fired, okInt = 0, 1
	}
	return []int64{fired, okInt, limit - sum, reset, retry}
}

// state returns what the key should hold for n sub-windows: L is the
// newest sub-window holding units.
func (m counterModel) state(n int64) counterState {
	st := counterState{counts: make([]int64, n)}
	idx := slices.Sorted(maps.Keys(m))
	if len(idx) == 0 {
		return st
	}
	st.last = idx[len(idx)-1]
	st.d = st.last - idx[0]
	for _, i := range idx {
		st.total += m[i]
		st.counts[st.last-i] = m[i]
	}
	return st
}

// TestSlidingCounterState: the stored string, step by step: the first
// admission, more in the same sub-window (in place), a later sub-window
// (the counts move), a rejection (nothing written), and the expiry at the
// end of the newest sub-window's count.
func TestSlidingCounterState(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "counter"
		const window, limit, n = 1e6, 5, 4
		const sub = window / n
		script := singleFor(rule{alg: 1, window: window, limit: limit, param: n})
		if err := script.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
		clock := startClock() + 60e6
		clock += sub - clock%sub // the start of a sub-window
		c0 := clock / sub
		for i, s := range []struct {
			at, cost int64
			want     []int64 // fired, ok, remaining, reset, retry
			state    counterState
		}{
			{clock, 1, []int64{0, 1, 4, window, 0}, counterState{c0, 0, 1, []int64{1, 0, 0, 0}}},
			{clock + 10, 2, []int64{0, 1, 2, window - 10, 0}, counterState{c0, 0, 3, []int64{3, 0, 0, 0}}},
			{clock + 2*sub, 1, []int64{0, 1, 1, window - 2*sub, 0}, counterState{c0 + 2, 2, 4, []int64{1, 0, 3, 0}}},
			{clock + 2*sub + 1, 2, []int64{1, 0, 1, window - 2*sub - 1, window - 2*sub - 1}, counterState{c0 + 2, 2, 4, []int64{1, 0, 3, 0}}},
			{clock + 3*sub, 1, []int64{0, 1, 0, window - 3*sub, 0}, counterState{c0 + 3, 3, 5, []int64{1, 1, 0, 3}}},
			// Sub-window c0 has left: the others are read.
			{clock + window, 3, []int64{0, 1, 0, 2 * sub, 0}, counterState{c0 + 4, 2, 5, []int64{3, 1, 1, 0}}},
			// A rejection that needs more than one unit to leave: all of
			// sub-window c0+4's.
			{clock + window, 4, []int64{1, 0, 0, 2 * sub, window}, counterState{c0 + 4, 2, 5, []int64{3, 1, 1, 0}}},
			// Everything has left.
			{clock + 2*window, 5, []int64{0, 1, 0, window, 0}, counterState{c0 + 8, 0, 5, []int64{5, 0, 0, 0}}},
		} {
			var run *redis.Cmd
			var exp *redis.DurationCmd
			if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				run = script.EvalSha(ctx, p, []string{key}, singleArgs(s.at, s.cost)...)
				exp = p.PExpireTime(ctx, key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got := ints(t, run.Val())
			if !slices.Equal(got[1:], s.want) {
				t.Fatalf("step %d (at +%d, cost %d): reply %v, want %v", i, s.at-clock, s.cost, got[1:], s.want)
			}
			raw, err := c.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			st, err := decodeCounter(raw)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(st) != fmt.Sprint(s.state) {
				t.Fatalf("step %d: stored %v, want %v", i, st, s.state)
			}
			// The key expires when sub-window L stops being counted.
			if want := (s.state.last + n) * sub / 1000; exp.Val().Milliseconds() != want {
				t.Fatalf("step %d: expires at %d ms, want %d", i, exp.Val().Milliseconds(), want)
			}
		}
	})
}

// TestSlidingCounterMatchesModel runs seeded random timelines through the
// single-rule script and compares every reply and the stored string with
// counterModel: gaps of all sizes, costs up to the limit, the clock
// stepping back (by up to two windows), and, on one key, the number of
// sub-windows changing with the window (the same sub-window length, so the
// same key), which reads a string of another length.
func TestSlidingCounterMatchesModel(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		for ci, cfg := range []struct {
			sub, limit int64
			ns         []int64 // the numbers of sub-windows to pick from
		}{
			{100e3, 10, []int64{10}},
			{1000, 3, []int64{1}},
			{250e3, 20, []int64{4}},
			{350, 100, []int64{3, 10, 60}},
			{100e3, 8, []int64{2, 5}},
		} {
			t.Run(fmt.Sprint(cfg), func(t *testing.T) {
				key := prefix(t) + "counter"
				rng := rand.New(rand.NewPCG(uint64(ci), 7))
				model := counterModel{}
				clock := startClock() + 3600e6
				n := cfg.ns[0]
				var admitted, rejected, back int
				for step := range 600 {
					if rng.IntN(40) == 0 {
						n = cfg.ns[rng.IntN(len(cfg.ns))]
					}
					window := cfg.sub * n
					switch r := rng.IntN(40); {
					case r < 8: // the same microsecond
					case r < 24:
						clock += rng.Int64N(cfg.sub)
					case r < 34:
						clock += rng.Int64N(2 * window)
					case r < 38:
						clock += rng.Int64N(window / 4)
					default:
						clock -= rng.Int64N(2 * window)
						back++
					}
					cost := int64(1)
					if rng.IntN(3) == 0 {
						cost = 1 + rng.Int64N(cfg.limit)
					}
					script := singleFor(rule{alg: 1, window: window, limit: cfg.limit, param: n})
					got := ints(t, script.Run(ctx, c, []string{key}, singleArgs(clock, cost)...).Val())
					want := model.decide(clock, window, cfg.limit, n, cost)
					if !slices.Equal(got[1:], want) {
						t.Fatalf("step %d (clock %d, n %d, cost %d): reply %v, want %v (model %v)", step, clock, n, cost, got[1:], want, model)
					}
					if got[1] == 0 {
						admitted++
						raw, err := c.Get(ctx, key).Result()
						if err != nil {
							t.Fatal(err)
						}
						st, err := decodeCounter(raw)
						if err != nil {
							t.Fatal(err)
						}
						if w := model.state(n); fmt.Sprint(st) != fmt.Sprint(w) {
							t.Fatalf("step %d (clock %d, n %d): stored %v, want %v", step, clock, n, st, w)
						}
					} else {
						rejected++
					}
					// A real server expires keys on its own clock.
					c.Persist(ctx, key)
				}
				if admitted < 50 || rejected < 50 || back < 5 {
					t.Errorf("%d admitted, %d rejected, %d steps back: the timeline does not exercise them", admitted, rejected, back)
				}
			})
		}
	})
}

// TestSlidingCounterClockBack: after the clock steps back more than a
// window, an admission is recorded in the oldest sub-window the newest one
// keeps (which leaves later than the current one: it only rejects more),
// and the units of the newest sub-window count until they leave.
func TestSlidingCounterClockBack(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "counter"
		const window, limit, n = 10e6, 4, 10
		script := singleFor(rule{alg: 1, window: window, limit: limit, param: n})
		const sub = window / n
		clock := startClock() + 120e6
		clock -= clock % sub
		run := func(at, cost int64) []int64 {
			t.Helper()
			return ints(t, script.Run(ctx, c, []string{key}, singleArgs(at, cost)...).Val())[1:]
		}
		if got := run(clock, 2); got[0] != 0 {
			t.Fatalf("%v", got)
		}
		c0 := clock / sub
		// Recorded in sub-window c0-9, which leaves at c0+1.
		back := clock - 3*window
		if got, want := run(back, 1), []int64{0, 1, 1, (c0+1)*sub - back, 0}; !slices.Equal(got, want) {
			t.Fatalf("after the step: %v, want %v", got, want)
		}
		st, err := decodeCounter(c.Get(ctx, key).Val())
		if err != nil {
			t.Fatal(err)
		}
		if want := (counterState{c0, n - 1, 3, []int64{2, 0, 0, 0, 0, 0, 0, 0, 0, 1}}); fmt.Sprint(st) != fmt.Sprint(want) {
			t.Fatalf("stored %v, want %v", st, want)
		}
		// A cost of 2 does not fit until that unit leaves; the two of c0
		// count meanwhile, whatever the clock says.
		for _, at := range []int64{back + 1, clock - 1, clock + sub - 1} {
			if got, want := run(at, 2), []int64{1, 0, 1, (c0+1)*sub - at, (c0+1)*sub - at}; !slices.Equal(got, want) {
				t.Fatalf("at clock%+d: %v, want %v", at-clock, got, want)
			}
		}
		if got, want := run(clock+sub, 2), []int64{0, 1, 0, (c0+n)*sub - clock - sub, 0}; !slices.Equal(got, want) {
			t.Fatalf("at clock+sub: %v, want %v", got, want)
		}
	})
}

// TestSlidingCounterMemory: a counter key of 10 sub-windows takes at most
// 160 bytes on a real server, written with SET (a new sub-window) and with
// SETRANGE (the same one); 1000 sub-windows are logged.
func TestSlidingCounterMemory(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	clock := startClock()
	for _, n := range []int64{10, 1000} {
		// As long a name as bench's (bench/RESULTS.md).
		key := fmt.Sprintf("bench-counter:sc-%d:{mem:%d}", 100000, n)
		script := singleFor(rule{alg: 1, window: 100e3 * n, limit: 1e9, param: n})
		for i := range int64(25) {
			at := clock + i*50e3
			if got := ints(t, script.Run(ctx, c, []string{key}, singleArgs(at, 1)...).Val()); got[1] != 0 {
				t.Fatalf("%v", got)
			}
			bytes := c.MemoryUsage(ctx, key, 0).Val()
			if n == 10 && bytes > 160 {
				t.Fatalf("after %d admissions: MEMORY USAGE %d bytes, want at most 160", i+1, bytes)
			}
		}
		t.Logf("%4d sub-windows: %d bytes (%s), key of %d bytes", n, c.MemoryUsage(ctx, key, 0).Val(), c.ObjectEncoding(ctx, key).Val(), len(key))
	}
}

// TestSlidingCounterLargeN: 1000 sub-windows, read whole on the uncommon
// path (a sub-window leaves while newer ones count), on both backends.
func TestSlidingCounterLargeN(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "counter"
		const n, sub, limit = 1000, 1000, 3
		script := singleFor(rule{alg: 1, window: n * sub, limit: limit, param: n})
		clock := startClock() + 60e6
		clock -= clock % sub
		model := counterModel{}
		for _, at := range []int64{clock, clock + 500*sub, clock + 999*sub, clock + 1000*sub, clock + 1000*sub, clock + 1500*sub, clock + 1999*sub} {
			got := ints(t, script.Run(ctx, c, []string{key}, singleArgs(at, 1)...).Val())
			if want := model.decide(at, n*sub, limit, n, 1); !slices.Equal(got[1:], want) {
				t.Fatalf("at clock+%d: %v, want %v", at-clock, got[1:], want)
			}
		}
		st, err := decodeCounter(c.Get(ctx, key).Val())
		if err != nil {
			t.Fatal(err)
		}
		if w := model.state(n); fmt.Sprint(st) != fmt.Sprint(w) {
			t.Fatalf("stored %v, want %v", st, w)
		}
	})
}

// TestSlidingCounterLongerWindow: a rule of more sub-windows of the same
// length (an override's longer window) reads the key as it is, counting
// every unit it holds, and a rejection keeps the key until its newest
// sub-window leaves the longer window, although its TTL was set for the
// shorter one.
func TestSlidingCounterLongerWindow(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		const sub = int64(10e6) // long, so that no key expires on the server's own clock while the test runs
		short := rule{alg: number(t, "sliding_counter"), window: 2 * sub, limit: 3, param: 2}
		long := rule{alg: short.alg, window: 4 * sub, limit: 3, param: 4}
		now := startClock()
		key := prefix(t) + "sc-50000000:{k}"
		if got := ints(t, singleFor(short).Run(ctx, c, []string{key}, singleArgs(now, 3)...).Val()); got[1] != 0 {
			t.Fatalf("3 of 3 under 2 sub-windows: %v, want admitted", got)
		}
		if r := singleFor(long).Run(ctx, c, []string{key}, singleArgs(now, 1)...); r.Err() != nil {
			t.Fatal(r.Err())
		} else if got := ints(t, r.Val()); got[1] != 1 || got[3] != 0 {
			t.Fatalf("under 4 sub-windows: %v, want rejected with 0 remaining", got)
		}
		last := now / sub
		ttl, err := c.PTTL(ctx, key).Result()
		if least := (last+4)*sub/1000 - time.Now().UnixMilli(); err != nil || ttl.Milliseconds() < least {
			t.Fatalf("PTTL after the rejection: %v, %v; want at least %d ms", ttl, err, least)
		}
	})
}
