package lua

// Tests of the weighted sliding log: its entries (one per admitted request,
// as sliding_log.lua documents them), the cost of one decision whatever its
// cost, the wrap of its running count, the keys written by the format
// before it, and random timelines against a plain reference model.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// logEntry is one entry of a sliding-log key: its score and what its member
// says (first is 0 when the member does not carry it).
type logEntry struct {
	score, at, cum, units, cost, first int64
}

// bigEndian reads b as an unsigned big-endian integer.
func bigEndian(b string) int64 {
	var x int64
	for i := 0; i < len(b); i++ {
		x = x<<8 | int64(b[i])
	}
	return x
}

// decodeMember reads a member of sliding_log.lua: at (7 bytes), cum (7),
// units (4), then first (7) when its units are exact, or cost (4) unless it
// is 1.
func decodeMember(m string) (logEntry, error) {
	if len(m) != 18 && len(m) != 22 && len(m) != 25 {
		return logEntry{}, fmt.Errorf("member %q: %d bytes, want 18, 22 or 25", m, len(m))
	}
	e := logEntry{at: bigEndian(m[0:7]), cum: bigEndian(m[7:14]), units: bigEndian(m[14:18]), cost: 1}
	if len(m) == 25 {
		e.first = bigEndian(m[18:25])
		if e.first == 0 || e.first > e.at {
			return e, fmt.Errorf("member %q: first %d is not an entry's time at or before its own %d", m, e.first, e.at)
		}
	}
	if len(m) == 22 {
		e.cost = bigEndian(m[18:22])
		if e.cost == 1 {
			return e, fmt.Errorf("member %q: a cost of 1 written out", m)
		}
	}
	return e, nil
}

// encodeMember is decodeMember's inverse, to write entries as the script
// would.
func encodeMember(e logEntry) string {
	put := func(b []byte, x int64) []byte {
		for i := len(b) - 1; i >= 0; i-- {
			b[i] = byte(x)
			x >>= 8
		}
		return b
	}
	m := append(put(make([]byte, 7), e.at), put(make([]byte, 7), e.cum)...)
	m = append(m, put(make([]byte, 4), e.units)...)
	if e.cost != 1 {
		m = append(m, put(make([]byte, 4), e.cost)...)
	} else if e.first != 0 {
		m = append(m, put(make([]byte, 7), e.first)...)
	}
	return string(m)
}

// logEntries returns a sliding-log key's entries in the set's order.
func logEntries(ctx context.Context, t *testing.T, c *redis.Client, key string) []logEntry {
	t.Helper()
	zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]logEntry, len(zs))
	for i, z := range zs {
		e, err := decodeMember(z.Member.(string))
		if err != nil {
			t.Fatalf("entry %d of %s: %v", i, key, err)
		}
		e.score = int64(z.Score)
		out[i] = e
	}
	return out
}

// logDecide runs one decision of the single-rule sliding-log script with
// the given settings and returns its reply (now, fired, ok, remaining,
// reset, retry).
func logDecide(ctx context.Context, t *testing.T, c *redis.Client, key string, now, window, limit, param, cost int64) []int64 {
	t.Helper()
	reply, err := logScript(window, limit, param).Run(ctx, c, []string{key}, singleArgs(now, cost)...).Result()
	if err != nil {
		t.Fatalf("cost %d at %d: %v", cost, now, err)
	}
	got := ints(t, reply)
	if len(got) != 6 {
		t.Fatalf("reply %v", got)
	}
	return got
}

// logScript returns the single-rule sliding-log script with the given
// settings.
func logScript(window, limit, param int64) *redis.Script {
	return singleFor(rule{alg: 0, window: window, limit: limit, param: param})
}

// TestSlidingLogEntries: an admitted request is one entry, whatever its
// cost; its member holds its time (the score), the running count of units
// (cum), a bound of the units in the window and its cost; entries of one
// microsecond stay in admission order (the newest last), also across the
// byte boundaries of cum; and rejected requests write nothing.
func TestSlidingLogEntries(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "log"
		const window, limit = 10e6, 100_000
		clock := startClock()
		clock += 16 - clock%16 + 1
		type step struct {
			at, cost int64
			admit    bool
		}
		var steps []step
		// 300 requests in one microsecond (cum crosses 255 and 256), with
		// costs of 1, 7 and 1000, then a few more later; then one that does
		// not fit.
		for i := range 300 {
			cost := int64(1)
			switch i % 10 {
			case 3:
				cost = 7
			case 7:
				cost = 1000
			}
			steps = append(steps, step{clock, cost, true})
		}
		steps = append(steps, step{clock + 5, 2, true}, step{clock + 5, 1, true}, step{clock + 9, 99_999, false})
		var want []logEntry
		var cum int64
		for i, s := range steps {
			before := state(ctx, t, c, key)
			got := logDecide(ctx, t, c, key, s.at, window, limit, 64, s.cost)
			if (got[1] == 0) != s.admit {
				t.Fatalf("step %d (cost %d): reply %v, want admitted %v", i, s.cost, got, s.admit)
			}
			if !s.admit {
				if after := state(ctx, t, c, key); after != before {
					t.Fatalf("a rejected request changed the key")
				}
				continue
			}
			cum += s.cost
			want = append(want, logEntry{score: s.at, at: s.at, cum: cum, cost: s.cost})
			if rem := got[3]; rem > limit-cum || rem < 0 {
				t.Fatalf("step %d: remaining %d, want at most %d", i, rem, limit-cum)
			}
		}
		got := logEntries(ctx, t, c, key)
		if len(got) != len(want) {
			t.Fatalf("%d entries, want %d (one per admitted request)", len(got), len(want))
		}
		for i, e := range got {
			w := want[i]
			if e.score != w.score || e.at != w.at || e.cum != w.cum || e.cost != w.cost {
				t.Fatalf("entry %d: %+v, want %+v (entries in admission order)", i, e, w)
			}
			if e.units < e.cum || e.units > limit {
				t.Fatalf("entry %d: units %d, want from the true %d (nothing has left) to the limit", i, e.units, e.cum)
			}
			// An entry that says its units are exact has the true count,
			// and the first entry's time: nothing has left the window.
			if e.first != 0 && (e.units != e.cum || e.first != got[0].at) {
				t.Fatalf("entry %d: exact units %d since %d, want %d since %d", i, e.units, e.first, e.cum, got[0].at)
			}
		}
	})
}

// TestSlidingLogHeavyCost: one decision does the same small work whatever
// its cost: a request of cost 1e6 under a limit of 1e9 holds Redis well
// under a millisecond and leaves one entry (the format before this one
// wrote one entry per unit: a million ZADDs, seconds of Redis time). So
// does a rejection whose retry needs a binary search over 10,000 entries.
// Redis's own time is read from INFO commandstats, not the wall clock of a
// loaded machine; each is the best of three tries, on fresh keys.
func TestSlidingLogHeavyCost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const window, limit = 60e6, 1e9
	script := logScript(window, limit, 64)
	if err := script.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	// evalUsec runs f and returns the µs Redis spent in EVALSHA meanwhile.
	evalUsec := func(f func()) int64 {
		t.Helper()
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		f()
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(kv, "usec="); ok {
						n, err := strconv.ParseInt(v, 10, 64)
						if err != nil {
							t.Fatal(err)
						}
						return n
					}
				}
			}
		}
		t.Fatalf("no cmdstat_evalsha in %q", info)
		return 0
	}
	best := func(what string, f func(try int)) {
		t.Helper()
		var took []int64
		for try := range 3 {
			took = append(took, evalUsec(func() { f(try) }))
		}
		t.Logf("%s: Redis time %v µs", what, took)
		if slices.Min(took) >= 1000 {
			t.Errorf("%s: at least %d µs of Redis time, want well under 1 ms", what, slices.Min(took))
		}
	}
	clock := startClock()
	p := prefix(t)
	best("one decision of cost 1e6", func(try int) {
		key := p + "heavy" + strconv.Itoa(try)
		if got := logDecide(ctx, t, c, key, clock, window, limit, 64, 1e6); got[1] != 0 || got[3] != limit-1e6 {
			t.Fatalf("reply %v, want admitted with %d remaining", got, int64(limit-1e6))
		}
		if n := c.ZCard(ctx, key).Val(); n != 1 {
			t.Fatalf("the key holds %d entries, want 1", n)
		}
	})
	best("one decision of cost 1e9", func(try int) {
		key := p + "whole" + strconv.Itoa(try)
		if got := logDecide(ctx, t, c, key, clock, window, limit, 64, 1e9); got[1] != 0 || got[3] != 0 {
			t.Fatalf("reply %v, want admitted with 0 remaining", got)
		}
	})
	// 10,000 entries of 1e5 units each fill the limit; a request of 5e8+1
	// units fits once the entry holding the (5e8+1)th unit, the 5001st, has
	// left.
	key := p + "full"
	pipe := c.Pipeline()
	for i := range int64(10_000) {
		script.EvalSha(ctx, pipe, []string{key}, singleArgs(clock+i, 1e5)...)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if got := ints(t, cmd.(*redis.Cmd).Val()); got[1] != 0 {
			t.Fatalf("filling, request %d: %v", i, got)
		}
	}
	now := clock + 20_000
	best("a rejection searching 10,000 entries", func(int) {
		got := logDecide(ctx, t, c, key, now, window, limit, 64, 5e8+1)
		if want := []int64{1, 0, 0, clock + window - now, clock + 5000 + window - now}; !slices.Equal(got[1:], want) {
			t.Fatalf("reply %v, want fired, not ok, remaining, reset, retry %v", got[1:], want)
		}
	})
}

// TestSlidingLogCumWraps: the running count goes back by 2^51 once it
// reaches 2^52 (so it stays exact), never inside a run of entries of one
// microsecond, and the counts across the wrap stay exact.
func TestSlidingLogCumWraps(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "log"
		const window, limit = 1e6, 10
		const top = int64(1) << 52
		clock := startClock()
		clock += 16 - clock%16 + 1
		// An entry as if 2^52 - 5 units had passed on the key.
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(clock), Member: encodeMember(logEntry{at: clock, cum: top - 5, units: 1, cost: 1})}).Err(); err != nil {
			t.Fatal(err)
		}
		cums := func() []int64 {
			var cums []int64
			for _, e := range logEntries(ctx, t, c, key) {
				cums = append(cums, e.cum)
			}
			return cums
		}
		for i, s := range []struct {
			at, cost int64
			want     []int64 // fired, ok, remaining, reset, retry
		}{
			{clock, 3, []int64{0, 1, 6, 1e6, 0}},     // cum 2^52 - 2, on the bound
			{clock, 3, []int64{0, 1, 3, 1e6, 0}},     // cum 2^52 + 1: the same microsecond, no wrap
			{clock + 1, 2, []int64{0, 1, 1, 1e6, 0}}, // wraps: 2^51 + 3
			{clock + 2, 2, []int64{1, 0, 1, 1e6 - 2, 1e6 - 2}},
			{clock + window, 8, []int64{0, 1, 0, 1e6, 0}}, // the first three left: 2 units
			{clock + window, 1, []int64{1, 0, 0, 1, 1}},
			{clock + window + 1, 2, []int64{0, 1, 0, 1e6, 0}}, // 8 units
		} {
			got := logDecide(ctx, t, c, key, s.at, window, limit, 0, s.cost)
			if !slices.Equal(got[1:], s.want) {
				t.Fatalf("step %d (at +%d, cost %d): reply %v, want %v", i, s.at-clock, s.cost, got[1:], s.want)
			}
			if i == 2 {
				if want := []int64{top - 5, top - 2, top + 1, top/2 + 3}; !slices.Equal(cums(), want) {
					t.Fatalf("cum of the entries %v, want %v", cums(), want)
				}
			}
		}
		// The exact counts swept the entries that left.
		if want := []int64{top/2 + 11, top/2 + 13}; !slices.Equal(cums(), want) {
			t.Fatalf("cum of the entries %v, want %v", cums(), want)
		}
	})
}

// TestSlidingLogOlderFormat: a key written by the format before this one
// (a member per unit, named after its time) is read conservatively: its
// entries count one unit each, exactly while one is the newest entry, and
// never less than they hold while one is the oldest in the window; once
// they have left, the count is exact again.
func TestSlidingLogOlderFormat(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "log"
		const window, limit = 1e6, 10
		clock := startClock()
		clock += 16 - clock%16 + 1
		// Four units: two at clock, two a microsecond later, as the old
		// script named them.
		sec, usec := (clock+1)/1e6, (clock+1)%1e6
		for _, z := range []redis.Z{
			{Score: float64(clock), Member: strconv.FormatInt(clock, 10)},
			{Score: float64(clock), Member: fmt.Sprintf("%d.%d-%d", clock/1e6, clock%1e6, 4)},
			{Score: float64(clock + 1), Member: strconv.FormatInt(clock+1, 10)},
			{Score: float64(clock + 1), Member: fmt.Sprintf("%d.%d-%d", sec, usec, 4)},
		} {
			if err := c.ZAdd(ctx, key, z).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range []struct {
			at, cost int64
			want     []int64 // fired, ok, remaining, reset, retry
		}{
			{clock + 2, 1, []int64{0, 1, 5, 1e6 - 2, 0}}, // the old newest: counted exactly
			{clock + 3, 6, []int64{1, 0, 5, 1e6 - 3, 1e6 - 3}},
			{clock + 3, 5, []int64{0, 1, 0, 1e6 - 3, 0}},
			// The two old units of clock have left, but an old one is the
			// oldest in the window: all the units since count.
			{clock + window, 1, []int64{1, 0, 0, 1, 1}},
			// Every old unit has left: exact again (the six of this format).
			{clock + window + 1, 4, []int64{0, 1, 0, 1, 0}},
			{clock + window + 2, 2, []int64{1, 0, 1, 1, 1}},
		} {
			got := logDecide(ctx, t, c, key, s.at, window, limit, 64, s.cost)
			if !slices.Equal(got[1:], s.want) {
				t.Fatalf("step %d (at +%d, cost %d): reply %v, want %v", i, s.at-clock, s.cost, got[1:], s.want)
			}
		}
	})
}

// TestSlidingLogClockBack: after the clock steps back, a request is
// recorded at the newest entry's time (so entries stay in admission order),
// entries newer than now count, and nothing is admitted that the window
// without the step would not admit.
func TestSlidingLogClockBack(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "log"
		const window, limit = 60e6, 10
		clock := startClock() + 60e6
		clock += 16 - clock%16 + 1
		for range 5 {
			if got := logDecide(ctx, t, c, key, clock, window, limit, 64, 1); got[1] != 0 {
				t.Fatalf("%v", got)
			}
		}
		back := clock - 30e6
		for i := range 5 {
			got := logDecide(ctx, t, c, key, back+int64(i), window, limit, 64, 1)
			if want := []int64{0, 1, 4 - int64(i), clock + window - back - int64(i), 0}; !slices.Equal(got[1:], want) {
				t.Fatalf("after the step, request %d: %v, want %v", i, got[1:], want)
			}
		}
		for _, e := range logEntries(ctx, t, c, key) {
			if e.at != clock || e.score != clock {
				t.Fatalf("an entry at %d, want every one at %d (the newest entry's time)", e.at, clock)
			}
		}
		// Full until the entries of clock leave, a window after clock.
		for _, at := range []int64{back + 10, clock - 1, clock, clock + window - 1} {
			got := logDecide(ctx, t, c, key, at, window, limit, 64, 1)
			if want := []int64{1, 0, 0, clock + window - at, clock + window - at}; !slices.Equal(got[1:], want) {
				t.Fatalf("at clock%+d: %v, want %v", at-clock, got[1:], want)
			}
		}
		if got := logDecide(ctx, t, c, key, clock+window, window, limit, 64, limit); got[1] != 0 {
			t.Fatalf("a window after the entries: %v, want the whole limit admitted", got)
		}
	})
}

// TestSlidingLogMemory logs the memory per entry of a sliding-log key on a
// real server, at 100 entries (a listpack) and 10,000 (a skiplist), for
// requests of cost 1 and of cost 1000.
func TestSlidingLogMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	script := logScript(3600e6, 1e9, 64)
	if err := script.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	clock := startClock()
	for _, n := range []int64{100, 10_000} {
		for _, cost := range []int64{1, 1000} {
			key := fmt.Sprintf("%smem-%d-%d", prefix(t), n, cost)
			pipe := c.Pipeline()
			for i := range n {
				script.EvalSha(ctx, pipe, []string{key}, singleArgs(clock+i*997, cost)...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			enc := c.ObjectEncoding(ctx, key).Val()
			bytes := c.MemoryUsage(ctx, key, 0).Val()
			if card := c.ZCard(ctx, key).Val(); card != n {
				t.Fatalf("%d requests left %d entries", n, card)
			}
			t.Logf("%6d entries of cost %4d: %s, %d bytes, %.1f bytes per entry", n, cost, enc, bytes, float64(bytes)/float64(n))
		}
	}
}

// TestSlidingLogRealTimeSafety runs random timelines on which the clock
// sometimes steps back (by up to two windows) and checks the guarantee in
// real time: whatever the clock said, no span of a window's length of real
// time holds more than the limit of admitted units. Each call is followed
// by a PERSIST, so that a real server, which expires keys on its own clock,
// keeps what the test clock still counts.
func TestSlidingLogRealTimeSafety(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		for ci, cfg := range []struct{ window, limit, param int64 }{
			{1e6, 10, 64}, {7300, 100, 64}, {1e6, 1000, 64}, {1e6, 1000, 0},
		} {
			script := logScript(cfg.window, cfg.limit, cfg.param)
			if err := script.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			key := prefix(t) + "log"
			start := startClock() + 10*cfg.window   // room to step back
			var elapsed, offset int64               // real time since start; the clock says start + elapsed - offset
			type admission struct{ at, cost int64 } // at: real time
			var admitted []admission
			steps, backs := 1500, 0
			for i := range steps {
				switch r := rng.IntN(100); {
				case r < 5:
					offset += 1 + rng.Int64N(2*cfg.window)
					backs++
				case r < 30:
				case r < 80:
					elapsed += rng.Int64N(2*cfg.window/cfg.limit + 1)
				default:
					elapsed += rng.Int64N(cfg.window)
				}
				cost := int64(1)
				if rng.IntN(4) == 0 {
					cost = 1 + rng.Int64N(cfg.limit)
				}
				clock := start + elapsed - offset
				var cmd *redis.Cmd
				if _, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					cmd = script.EvalSha(ctx, pipe, []string{key}, singleArgs(clock, cost)...)
					pipe.Persist(ctx, key)
					return nil
				}); err != nil {
					t.Fatalf("%+v step %d: %v", cfg, i, err)
				}
				got := ints(t, cmd.Val())
				if got[1] != 0 {
					if got[5] < 1 {
						t.Fatalf("%+v step %d: rejected with retry %d", cfg, i, got[5])
					}
					continue
				}
				admitted = append(admitted, admission{elapsed, cost})
				// The units admitted in the last window of real time.
				var units int64
				for j := len(admitted) - 1; j >= 0 && admitted[j].at > elapsed-cfg.window; j-- {
					units += admitted[j].cost
				}
				if units > cfg.limit {
					t.Fatalf("%+v step %d (clock %d behind real time): %d units admitted within a window of real time, limit %d", cfg, i, offset, units, cfg.limit)
				}
			}
			t.Logf("%+v: %d steps, %d steps back, %d admitted", cfg, steps, backs, len(admitted))
			if backs == 0 || len(admitted) < steps/10 {
				t.Fatalf("%+v: %d steps back, %d admitted: the timeline does not exercise both", cfg, backs, len(admitted))
			}
		}
	})
}

// TestSlidingLogDecidesOnTheNewestEntry: once a key's newest entry holds
// exact units (its admission was counted, or found the window empty, or
// followed such an entry), requests are decided on that entry alone, one
// read each, until its oldest entry leaves the window: admissions up to the
// limit, and rejections. The reads are Redis's own count of ZREVRANGE and
// ZRANGE calls (INFO commandstats); the decisions are checked against the
// count too. Then the oldest entry leaves and the next request is counted
// exactly (one more read) and admitted, with the exact retry of the next.
func TestSlidingLogDecidesOnTheNewestEntry(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const window, limit = 60e6, 20
	key := prefix(t) + "log"
	clock := startClock()
	clock += 16 - clock%16 + 1 // no call below falls on a 16th (now % 16 == 0)
	calls := func() map[string]int64 {
		t.Helper()
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(rest, ",")[0], "calls="), 10, 64)
			out[name] = n
		}
		return out
	}
	logScript(window, limit, 64).Load(ctx, c)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	at := func(i int64) int64 { return clock + i*17 } // never a multiple of 16 apart
	for i := range int64(limit) {
		if got := logDecide(ctx, t, c, key, at(i), window, limit, 64, 1); got[1] != 0 || got[3] != limit-1-i {
			t.Fatalf("request %d: %v, want admitted with %d remaining", i, got, limit-1-i)
		}
	}
	for i := int64(limit); i < limit+30; i++ {
		got := logDecide(ctx, t, c, key, at(i), window, limit, 64, 1)
		if got[1] != 1 || got[3] != 0 || got[4] != clock+window-at(i) || got[5] != clock+window-at(i) {
			t.Fatalf("request %d: %v, want rejected, 0 remaining, reset and retry %d (the first entry leaves)", i, got, clock+window-at(i))
		}
	}
	n := calls()
	if n["zrevrange"] != limit+30 || n["zrange"] != 0 || n["zrangebyscore"] != 0 || n["zcount"] != 0 {
		t.Fatalf("%d decisions made %d ZREVRANGE, %d ZRANGE, %d ZRANGEBYSCORE and %d ZCOUNT calls; want one ZREVRANGE each and nothing else read", limit+30, n["zrevrange"], n["zrange"], n["zrangebyscore"], n["zcount"])
	}
	// The first entry leaves: the next request is counted exactly, and
	// admitted; the one after it is rejected until the second entry leaves.
	leave := clock + window
	if got := logDecide(ctx, t, c, key, leave, window, limit, 64, 1); got[1] != 0 || got[3] != 0 {
		t.Fatalf("when the first entry has left: %v, want admitted with 0 remaining", got)
	}
	if got := logDecide(ctx, t, c, key, leave+1, window, limit, 64, 1); got[1] != 1 || got[5] != at(1)+window-leave-1 {
		t.Fatalf("then: %v, want rejected until the second entry leaves (retry %d)", got, at(1)+window-leave-1)
	}
}

// refLog is a plain sliding log: every admitted request with its time and
// cost; the clock never steps back in the tests that use it.
type refLog struct {
	at, cost []int64
}

// decide returns what an exact sliding log answers at now for a request of
// cost under window and limit: admitted, remaining, reset, retry; and
// records it when admitted and record is true.
func (m *refLog) decide(now, window, limit, cost int64, record bool) (bool, int64, int64, int64) {
	var units int64
	oldest := -1
	for i := range m.at {
		if m.at[i] > now-window {
			units += m.cost[i]
			if oldest < 0 {
				oldest = i
			}
		}
	}
	if units+cost <= limit {
		reset := window
		if oldest >= 0 {
			reset = m.at[oldest] + window - now
		}
		if record {
			m.at, m.cost = append(m.at, now), append(m.cost, cost)
		}
		return true, limit - units - cost, reset, 0
	}
	k := units + cost - limit
	var freed int64
	retry := int64(-1)
	for i := oldest; i < len(m.at); i++ {
		freed += m.cost[i]
		if freed >= k {
			retry = m.at[i] + window - now
			break
		}
	}
	return false, max(0, limit-units), m.at[oldest] + window - now, retry
}

// TestSlidingLogRandomExact runs random timelines on one sliding-log
// key (the clock never goes back; many requests share a microsecond; costs
// mix 1 and more; the limit and exact-below change between calls, as a
// redeploy would change them, with the key holding more than a lowered
// limit), and compares every reply with the plain model: fired always;
// remaining and reset when rejected or when fewer than exact-below units
// remain (else remaining at most the model's, reset at least); retry
// always. Each step also runs a Peek first, and sometimes the request goes
// with a second rule that rejects (nothing may be recorded then). Each step
// PERSISTs the key so that the real server never expires what the test
// clock still counts.
func TestSlidingLogRandomExact(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		peek := redis.NewScript(Peek())
		several := redis.NewScript(Several())
		fw := number(t, "fixed_window")
		for _, s := range []*redis.Script{peek, several} {
			if err := s.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 33))
			const window = 1e6
			base := int64(10 + rng.IntN(30))
			limits := []int64{base, base / 2, base * 2, base + 1, 3}
			params := []int64{0, 3, 64, base}
			key := prefix(t) + "log"
			wall := prefix(t) + "wall" // the rejecting rule's key
			var m refLog
			clock := startClock()
			limit, param := base, int64(64)
			var admitted, rejected, fast int
			// A window of 1e15 µs (about 31 years): the test clock, which
			// starts at the wall clock and runs on up to ~20 min, never
			// crosses a window boundary, as it could with an hour.
			wallRule := rule{alg: fw, window: 1e15, limit: 1, cost: 1}
			if err := several.Run(ctx, c, []string{wall}, args(clock, wallRule)...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Persist(ctx, wall).Err(); err != nil {
				t.Fatal(err)
			}
			if seed >= 6 {
				// The key starts with one entry as if nearly 2^52 units
				// had passed on it: its running count wraps on the way.
				cum := int64(1)<<52 - []int64{1, 2, 5, 40}[seed-6]
				e := logEntry{at: clock, cum: cum, units: 1, cost: 1}
				if seed%2 == 0 {
					e.first = clock
				}
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(clock), Member: encodeMember(e)}).Err(); err != nil {
					t.Fatal(err)
				}
				m.at, m.cost = []int64{clock}, []int64{1}
			}
			for step := range 700 {
				switch r := rng.IntN(20); {
				case r < 6: // the same microsecond
				case r < 14:
					clock += rng.Int64N(2*window/base + 1)
				case r < 17:
					clock += rng.Int64N(window / 4)
				case r < 19 && len(m.at) > 0:
					// To the moment an entry leaves, or a µs either side.
					e := m.at[rng.IntN(len(m.at))] + window - 1 + rng.Int64N(3)
					clock = max(clock, e)
				default:
					clock += rng.Int64N(window * 3 / 2)
				}
				if rng.IntN(40) == 0 {
					limit = limits[rng.IntN(len(limits))]
				}
				if rng.IntN(60) == 0 {
					param = params[rng.IntN(len(params))]
				}
				cost := int64(1)
				if rng.IntN(5) == 0 {
					cost = 1 + rng.Int64N(min(limit, 5))
				}
				r := rule{alg: 0, window: window, limit: limit, param: param, cost: cost}
				blocked := rng.IntN(8) == 0
				single := loadedSingle(ctx, t, c, r)
				var look, cmd *redis.Cmd
				_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					look = peek.EvalSha(ctx, pipe, []string{key}, args(clock, r)...)
					if blocked {
						// The wall rule is full: it rejects.
						cmd = several.EvalSha(ctx, pipe, []string{key, wall}, args(clock, r, wallRule)...)
					} else {
						cmd = single.EvalSha(ctx, pipe, []string{key}, singleArgs(clock, cost)...)
					}
					pipe.Persist(ctx, key)
					return nil
				})
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				l := ints(t, look.Val())
				got := ints(t, cmd.Val())
				what := fmt.Sprintf("seed %d step %d (clock +%d, limit %d, param %d, cost %d, blocked %v)", seed, step, clock-startClockBase(clock), limit, param, cost, blocked)
				// The Peek: what the rule alone would say, recording nothing.
				pok, prem, preset, pretry := m.decide(clock, window, limit, cost, false)
				checkLogReply(t, what+" Peek", l[2:6], pok, prem, preset, pretry, param, cost, true)
				ok, rem, reset, retry := m.decide(clock, window, limit, cost, !blocked)
				rule1 := got[2:6]
				if blocked {
					if want := 2 - b2i(!ok); got[1] != want {
						t.Fatalf("%s: fired %d, want %d", what, got[1], want)
					}
					checkLogReply(t, what, rule1, ok, rem, reset, retry, param, cost, true)
					continue
				}
				if (got[1] == 0) != ok {
					t.Fatalf("%s: reply %v, model admits %v (remaining %d, reset %d, retry %d)\nentries %v", what, got[1:], ok, rem, reset, retry, describeLog(ctx, t, c, key))
				}
				if ok {
					admitted++
				} else {
					rejected++
				}
				checkLogReply(t, what, rule1, ok, rem, reset, retry, param, cost, false)
				if e := logEntries(ctx, t, c, key); len(e) > 0 && e[len(e)-1].first != 0 {
					fast++
				}
			}
			t.Logf("seed %d: %d admitted, %d rejected, %d steps with an exact newest entry", seed, admitted, rejected, fast)
			if admitted < 50 || rejected < 50 || fast < 50 {
				t.Errorf("seed %d: %d admitted, %d rejected, %d exact newest: the timeline does not exercise them", seed, admitted, rejected, fast)
			}
		}
	})
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// startClockBase is the clock's second, to print offsets.
func startClockBase(clock int64) int64 { return clock - clock%1e9 }

// checkLogReply checks one rule's {ok, remaining, reset, retry} against the
// model's answer. Without a record (a Peek, or another rule rejected), an
// admissible request's report is the key's exact state without it: the
// model's remaining plus its cost.
func checkLogReply(t *testing.T, what string, got []int64, ok bool, rem, reset, retry, param, cost int64, unrecorded bool) {
	t.Helper()
	if (got[0] == 1) != ok {
		t.Fatalf("%s: ok %d, model %v (remaining %d reset %d retry %d)", what, got[0], ok, rem, reset, retry)
	}
	if !ok {
		if got[1] != rem || got[2] != reset || got[3] != retry {
			t.Fatalf("%s: rejected with remaining %d reset %d retry %d; model %d %d %d", what, got[1], got[2], got[3], rem, reset, retry)
		}
		return
	}
	if unrecorded {
		if got[1] != rem+cost || got[2] != reset || got[3] != 0 {
			t.Fatalf("%s: admissible, unrecorded: remaining %d reset %d retry %d; model %d %d 0", what, got[1], got[2], got[3], rem+cost, reset)
		}
		return
	}
	if got[3] != 0 {
		t.Fatalf("%s: admitted with retry %d", what, got[3])
	}
	if rem < param {
		if got[1] != rem || got[2] != reset {
			t.Fatalf("%s: admitted with remaining %d reset %d; model %d %d (exact below %d)", what, got[1], got[2], rem, reset, param)
		}
		return
	}
	if got[1] > rem || got[2] < reset {
		t.Fatalf("%s: admitted with remaining %d reset %d; model %d %d: not bounds", what, got[1], got[2], rem, reset)
	}
}

// describeLog prints a sliding-log key's entries.
func describeLog(ctx context.Context, t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	var s string
	for _, e := range logEntries(ctx, t, c, key) {
		s += fmt.Sprintf("\n  at %d cum %d units %d cost %d first %d", e.at, e.cum, e.units, e.cost, e.first)
	}
	return s
}

// loadedSingle returns r's single-rule script, loaded on c.
func loadedSingle(ctx context.Context, t *testing.T, c *redis.Client, r rule) *redis.Script {
	t.Helper()
	s := singleFor(r)
	if err := s.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	return s
}
