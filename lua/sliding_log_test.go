package lua

// Tests of the weighted sliding log (sliding_log.lua): its string (one entry
// per admitted unit, then the trailer), the reads and writes of one
// decision, its memory, the Redis time of its heaviest decisions, its clock
// stepping back, the import of the ZSET an older version kept, and random
// timelines against a plain reference model.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// logTrailer is the length of a sliding-log key's trailer.
const logTrailer = 63

// bigEndian reads b as an unsigned big-endian integer.
func bigEndian(b string) int64 {
	var x int64
	for i := 0; i < len(b); i++ {
		x = x<<8 | int64(b[i])
	}
	return x
}

// logKey is a sliding-log key as sliding_log.lua documents it: the body's
// entries as times in µs (dead ones included), and the trailer. While the
// body starts with a header (lcum's bit 52, see Upgrade), hdr holds it,
// and body, n and tail count the entries after it.
type logKey struct {
	body                        []int64
	base, n, tail, newest, lcum int64
	q                           []int64
	hdr                         string
}

// logHeader is the bit of lcum that says the body starts with a header of
// 16 bytes (4 entries), and what it counts.
const logHeader = 1 << 52

// readLog reads a sliding-log key and checks that its parts agree: n
// entries in the body, tail within it, q's entries from qi on a copy of the
// entries from tail on, first tail's entry, the entries in order and newest
// the last. ok is false when there is no
// key.
func readLog(ctx context.Context, t *testing.T, c *redis.Client, key string) (k logKey, ok bool) {
	t.Helper()
	s, err := c.Get(ctx, key).Result()
	if err == redis.Nil {
		return k, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(s) < logTrailer || (len(s)-logTrailer)%4 != 0 {
		t.Fatalf("%s: %d bytes, not a body of 4-byte entries and a trailer of %d", key, len(s), logTrailer)
	}
	tr := s[len(s)-logTrailer:]
	k.base, k.n, k.tail, k.newest, k.lcum = bigEndian(tr[0:6]), bigEndian(tr[6:10]), bigEndian(tr[10:14]), bigEndian(tr[14:18]), bigEndian(tr[18:25])
	m, qi, first := int(tr[25]), int(tr[26]), (k.base+bigEndian(tr[27:31]))*1000
	from := 0
	if k.lcum >= logHeader {
		if len(s) < logTrailer+16 || k.tail < 4 {
			t.Fatalf("%s: a header in %d bytes, from tail %d", key, len(s), k.tail)
		}
		k.lcum, k.hdr, k.n, k.tail, from = k.lcum-logHeader, s[:16], k.n-4, k.tail-4, 16
		if k.n == k.tail && m == 0 {
			// Nothing but the header: newest is its range's.
			return k, true
		}
	}
	for i := from; i < len(s)-logTrailer; i += 4 {
		k.body = append(k.body, (k.base+bigEndian(s[i:i+4]))*1000)
	}
	for i := qi; i < m; i++ {
		k.q = append(k.q, (k.base+bigEndian(tr[31+4*i:35+4*i]))*1000)
	}
	switch {
	case int64(len(k.body)) != k.n:
		t.Fatalf("%s: %d entries, the trailer says %d", key, len(k.body), k.n)
	case k.tail >= k.n || m > 8 || qi >= m || int64(m-qi) > k.n-k.tail:
		t.Fatalf("%s: tail %d, q's %d from %d, of %d entries", key, k.tail, m, qi, k.n)
	case !slices.Equal(k.q, k.body[k.tail:k.tail+int64(m-qi)]):
		t.Fatalf("%s: q %v is not the entries from tail %d on, %v", key, k.q, k.tail, k.body[k.tail:])
	case first != k.body[k.tail]:
		t.Fatalf("%s: first %d is not tail's entry %d", key, first, k.body[k.tail])
	case !slices.IsSorted(k.body) || k.body[k.n-1] != (k.base+k.newest)*1000:
		t.Fatalf("%s: entries %v out of order, or newest %d not the last", key, k.body, k.newest)
	}
	return k, true
}

// live returns the entries of k in the window at now, and fails t when one
// before tail is still in it: tail moves on only past entries that left.
func (k logKey) live(t *testing.T, now, window int64) []int64 {
	t.Helper()
	for _, at := range k.body[:k.tail] {
		if at > now-window {
			t.Fatalf("an entry at %d before tail %d is in the window at %d", at, k.tail, now)
		}
	}
	i, _ := slices.BinarySearch(k.body, now-window+1)
	return k.body[max(int64(i), k.tail):]
}

// ceilMs is the time an admission at now is recorded at: now rounded up to
// the millisecond, in µs.
func ceilMs(now int64) int64 { return (now + 999) / 1000 * 1000 }

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

// zsetLogScript returns the single-rule script of the ZSET log that the
// version before kept (testdata), with the given settings and an
// exact-below of 64, as that version sent.
func zsetLogScript(t *testing.T, window, limit int64) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/single_sliding_log_zset.lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(strings.NewReplacer("@WINDOW@", strconv.FormatInt(window, 10), "@LIMIT@", strconv.FormatInt(limit, 10),
		"@PARAM@", "64", "@SETTINGS_BAD@", "false").Replace(string(b)))
}

// commandCalls returns Redis's count of calls per command since the last
// CONFIG RESETSTAT.
func commandCalls(ctx context.Context, t *testing.T, c *redis.Client) map[string]int64 {
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
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				out[name+" usec"], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// TestSlidingLogEntries: an admitted request of cost c is c entries at its
// time rounded up to the millisecond; a rejected one writes nothing; the
// key expires a window after its newest entry, or up to a quarter of a
// window later.
func TestSlidingLogEntries(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "log"
		const window, limit = 60e6, 10
		clock := startClock()
		clock -= clock % 1000
		steps := []struct {
			at, cost int64
			admit    bool
		}{{1, 1, true}, {1000, 3, true}, {1001, 1, true}, {2500, 6, false}, {2500, 5, true}, {3000, 1, false}}
		var want []int64
		for _, s := range steps {
			before := c.Get(ctx, key).Val()
			got := logDecide(ctx, t, c, key, clock+s.at, window, limit, 0, s.cost)
			if (got[1] == 0) != s.admit {
				t.Fatalf("cost %d at +%d: %v, want admitted %v", s.cost, s.at, got, s.admit)
			}
			if !s.admit {
				if after := c.Get(ctx, key).Val(); after != before {
					t.Fatalf("a rejected request changed the key")
				}
				continue
			}
			for range s.cost {
				want = append(want, ceilMs(clock+s.at))
			}
			k, _ := readLog(ctx, t, c, key)
			if !slices.Equal(k.body, want) {
				t.Fatalf("after cost %d at +%d: entries %v, want %v", s.cost, s.at, k.body, want)
			}
			newest := want[len(want)-1] / 1000
			ttl := c.PExpireTime(ctx, key).Val().Milliseconds()
			if ttl < newest+window/1000 || ttl > newest+window/1000+window/4000 {
				t.Fatalf("expires at %d ms, want a window (%d ms) after the newest entry (%d ms), or up to a quarter later", ttl, int64(window/1000), newest)
			}
		}
		// The 4 entries of the first millisecond leave a window after it.
		if got := logDecide(ctx, t, c, key, clock+window+1000, window, limit, 0, 1); got[1] != 0 || got[3] != limit-6-1 {
			t.Fatalf("after the first 4 entries left: %v, want admitted with %d remaining", got, limit-7)
		}
	})
}

// TestSlidingLogReadsTheTrailer: a decision reads the key's trailer alone
// (one GETRANGE) and an admission writes with one SETRANGE, as long as the
// oldest entry in the window is in the trailer's copy; with entries leaving
// the window all the time, the body is read at most once per 8 that left.
// Redis's own count of each command (INFO commandstats) says so.
func TestSlidingLogReadsTheTrailer(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const window, limit = 60e6, 20
	key := prefix(t) + "log"
	clock := startClock()
	clock -= clock % 1000
	logScript(window, limit, 0).Load(ctx, c)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	at := func(i int64) int64 { return clock + i*17 }
	for i := range int64(limit) {
		if got := logDecide(ctx, t, c, key, at(i), window, limit, 0, 1); got[1] != 0 || got[3] != limit-1-i {
			t.Fatalf("request %d: %v, want admitted with %d remaining", i, got, limit-1-i)
		}
	}
	first := ceilMs(clock)
	for i := int64(limit); i < limit+30; i++ {
		got := logDecide(ctx, t, c, key, at(i), window, limit, 0, 1)
		if got[1] != 1 || got[3] != 0 || got[4] != first+window-at(i) || got[5] != first+window-at(i) {
			t.Fatalf("request %d: %v, want rejected, 0 remaining, reset and retry %d (the first entry leaves)", i, got, first+window-at(i))
		}
	}
	n := commandCalls(ctx, t, c)
	if n["getrange"] != limit+30 || n["set"] != 1 || n["setrange"] != limit-1 || n["exists"]+n["zrangebyscore"]+n["get"] != 0 {
		t.Fatalf("%d decisions, %d admitted: %v; want a GETRANGE each, one SET, a SETRANGE per other admission, nothing else read", limit+30, limit, n)
	}
	// A steady flow: one admission a millisecond under a window of 100 ms
	// and a limit of 1000, so that about one entry leaves per admission.
	const short, many = 100e3, 1000
	key = prefix(t) + "flow"
	logScript(short, many, 0).Load(ctx, c)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const calls = 2000
	flow := logScript(short, many, 0)
	for i := range int64(calls) {
		// PERSIST: the test clock runs ahead of the server's, which must
		// not expire what the test clock still counts on a slow machine.
		var cmd *redis.Cmd
		if _, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			cmd = flow.EvalSha(ctx, pipe, []string{key}, singleArgs(clock+i*1000, 1)...)
			pipe.Persist(ctx, key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := ints(t, cmd.Val()); got[1] != 0 || got[3] != many-min(i+1, 100) {
			t.Fatalf("flow request %d: %v, want admitted with %d remaining", i, got, many-min(i+1, 100))
		}
	}
	n = commandCalls(ctx, t, c)
	left := int64(calls - 100)
	if reads := n["getrange"] - calls; reads > left/8+int64(n["set"]) {
		t.Fatalf("%d decisions read the body %d times (and rewrote the key %d times) while %d entries left: more than once per 8", calls, reads, n["set"], left)
	}
	t.Logf("flow: %v", n)
}

// TestSlidingLogMemory: at most 10 bytes of Redis memory (MEMORY USAGE,
// SAMPLES 0) per unit in the window of a full key with a limit of 100,
// 1,000, 10,000 and 100,000 (the figures of docs/algorithms.md, which -v
// logs); at most 12.5 in a steady flow whose entries keep leaving,
// the bound of the design (4 bytes an entry, dead ones up to a quarter of
// the live ones, Redis doubling a string's allocation as SETRANGE grows it,
// and the allocator's size classes up to a quarter more); and a key with a
// limit of 10,000 that saw 20 requests stays small.
func TestSlidingLogMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// The fills send up to 100,000 admissions in one pipeline, whose replies
	// can take longer than go-redis's ReadTimeout on a loaded machine; a
	// retry would send them all again, and the key, full by then, would
	// refuse them. So: no retry, and time enough to read.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	clock := startClock()
	clock -= clock % 1000
	usage := func(key string) int64 {
		t.Helper()
		n, err := c.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fill := func(key string, window, limit, cost, count, step int64) {
		t.Helper()
		script := logScript(window, limit, 0)
		if err := script.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
		pipe := c.Pipeline()
		for i := range count {
			script.EvalSha(ctx, pipe, []string{key}, singleArgs(clock+i*step, cost)...)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			if got := ints(t, cmd.(*redis.Cmd).Val()); got[1] != 0 {
				t.Fatalf("%s: request %d rejected: %v", key, i, got)
			}
		}
	}
	p := prefix(t)
	for _, full := range []struct{ limit, cost int64 }{{100, 1}, {1000, 1}, {10_000, 1}, {100_000, 1}, {100_000, 100}} {
		key := fmt.Sprintf("%sfull-%d-%d", p, full.limit, full.cost)
		fill(key, 3600e6, full.limit, full.cost, full.limit/full.cost, 997)
		b := usage(key)
		t.Logf("limit %d, full with requests of cost %d: %d bytes, %.2f per unit", full.limit, full.cost, b, float64(b)/float64(full.limit))
		if b > 10*full.limit {
			t.Errorf("limit %d full: %d bytes, more than 10 per unit", full.limit, b)
		}
	}
	// The flow: 1,000 in a window of 1 s, one request a ms for 5 windows.
	// Its clock runs an hour ahead of Redis's: the key expires a window
	// after its last entry on the test clock (PXAT), and on a loaded
	// machine a call takes more than the millisecond the test clock moves
	// per request, so a clock only a second ahead would fall behind the
	// wall clock and the key would expire under the test.
	key := p + "flow"
	script := logScript(1e6, 1000, 0)
	var most float64
	flow := time.Now().Add(time.Hour).UnixMicro()
	flow -= flow % 1000
	for i := range int64(5000) {
		r := script.Run(ctx, c, []string{key}, singleArgs(flow+i*1000, 1)...)
		if r.Err() != nil {
			t.Fatalf("flow request %d: %v", i, r.Err())
		}
		if got := ints(t, r.Val()); got[1] != 0 {
			t.Fatalf("flow request %d: %v", i, got)
		}
		if i >= 1000 && i%97 == 0 {
			most = max(most, float64(usage(key))/1000)
		}
	}
	t.Logf("flow of 1,000 units in the window: at most %.2f bytes per unit", most)
	if most > 12.5 {
		t.Errorf("flow: up to %.2f bytes per unit in the window, more than 12.5", most)
	}
	key = p + "sparse"
	fill(key, 60e6, 10_000, 1, 20, 1000)
	b := usage(key)
	t.Logf("limit 10000 after 20 requests: %d bytes", b)
	if b > 300 {
		t.Errorf("a limit of 10,000 after 20 requests: %d bytes, want it small", b)
	}
}

// TestSlidingLogHeavyDecisions: the heaviest decisions cost Redis no more
// than 4× the bare write of a full key (measured beside them): an admission of cost 100,000 (the largest limit), a
// rejection whose retry is 50,000 units in, a decision after which half of
// a full key of 100,000 units has left the window (found by a binary
// search), and the admission that then rewrites the key without them.
// Redis's own time is read from INFO commandstats, not the wall clock of a
// loaded machine; each is the best of three tries, on fresh keys.
func TestSlidingLogHeavyDecisions(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const window, limit = 60e6, 100_000
	script := logScript(window, limit, 0)
	if err := script.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	// Redis's time is compared with a baseline measured beside it, not
	// with a fixed bound that a loaded machine would break: the least
	// Redis work any decision of cost 100,000 needs, a new 400 KB string
	// (one SETRANGE at its end, on a fresh key).
	floorScript := redis.NewScript(`redis.call('DEL', KEYS[1]) redis.call('SETRANGE', KEYS[1], tonumber(ARGV[1]) - 1, 'x') return 1`)
	if err := floorScript.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	timed := func(f func(try int)) int64 {
		var took []int64
		for try := range 3 {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			f(try)
			took = append(took, commandCalls(ctx, t, c)["evalsha usec"])
		}
		return slices.Min(took)
	}
	best := func(what string, f func(try int)) {
		t.Helper()
		floor := timed(func(try int) {
			if err := floorScript.Run(ctx, c, []string{prefix(t) + "floor"}, 4*limit).Err(); err != nil {
				t.Fatal(err)
			}
		})
		took := timed(f)
		t.Logf("%s: Redis time %d µs, the floor's (a new 400 KB string) %d µs: %.2f×", what, took, floor, float64(took)/float64(max(floor, 1)))
		if took > 4*max(floor, 100) {
			t.Errorf("%s: %d µs of Redis time, more than 4× the floor's %d µs", what, took, floor)
		}
	}
	clock := startClock()
	clock -= clock % 1000
	p := prefix(t)
	best("an admission of cost 100,000", func(try int) {
		got := logDecide(ctx, t, c, p+"heavy"+strconv.Itoa(try), clock, window, limit, 0, limit)
		if got[1] != 0 || got[3] != 0 {
			t.Fatalf("reply %v, want admitted with 0 remaining", got)
		}
	})
	// 1,000 requests of 100 units, a ms apart.
	full := func(key string) {
		pipe := c.Pipeline()
		for i := range int64(1000) {
			script.EvalSha(ctx, pipe, []string{key}, singleArgs(clock+i*1000, 100)...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for try := range 3 {
		full(p + "full" + strconv.Itoa(try))
	}
	now := clock + 2_000_000
	best("a rejection whose retry is 50,000 units in", func(try int) {
		got := logDecide(ctx, t, c, p+"full"+strconv.Itoa(try), now, window, limit, 0, 50_000)
		if want := []int64{1, 0, 0, clock + window - now, clock + 499_000 + window - now}; !slices.Equal(got[1:], want) {
			t.Fatalf("reply %v, want fired, not ok, remaining, reset, retry %v", got[1:], want)
		}
	})
	// Half the entries have left: the decision finds the oldest in the
	// window past the trailer's copy, and its admission rewrites the key.
	now = clock + window + 500_000
	best("an admission after half the key has left", func(try int) {
		key := p + "full" + strconv.Itoa(try)
		if got := logDecide(ctx, t, c, key, now, window, limit, 0, 1); got[1] != 0 || got[3] != limit-49_900-1 {
			t.Fatalf("reply %v, want admitted with %d remaining", got, limit-49_900-1)
		}
		if k, _ := readLog(ctx, t, c, key); k.n != 49_901 || k.tail != 0 {
			t.Fatalf("the key holds %d entries from tail %d, want only the 49,901 in the window", k.n, k.tail)
		}
	})
}

// TestSlidingLogClockBack: after the clock steps back, a request is
// recorded at the newest entry's time (so entries stay in order), entries
// newer than now count, and nothing is admitted that the window without the
// step would not admit.
func TestSlidingLogClockBack(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		key := prefix(t) + "log"
		const window, limit = 60e6, 10
		clock := startClock() + 60e6
		clock -= clock % 1000
		for range 5 {
			if got := logDecide(ctx, t, c, key, clock, window, limit, 0, 1); got[1] != 0 {
				t.Fatalf("%v", got)
			}
		}
		back := clock - 30e6
		for i := range 5 {
			got := logDecide(ctx, t, c, key, back+int64(i), window, limit, 0, 1)
			if want := []int64{0, 1, 4 - int64(i), clock + window - back - int64(i), 0}; !slices.Equal(got[1:], want) {
				t.Fatalf("after the step, request %d: %v, want %v", i, got[1:], want)
			}
		}
		k, _ := readLog(ctx, t, c, key)
		for _, at := range k.body {
			if at != clock {
				t.Fatalf("an entry at %d, want every one at %d (the newest entry's time)", at, clock)
			}
		}
		// Full until the entries of clock leave, a window after clock.
		for _, at := range []int64{back + 10, clock - 1, clock, clock + window - 1} {
			got := logDecide(ctx, t, c, key, at, window, limit, 0, 1)
			if want := []int64{1, 0, 0, clock + window - at, clock + window - at}; !slices.Equal(got[1:], want) {
				t.Fatalf("at clock%+d: %v, want %v", at-clock, got[1:], want)
			}
		}
		if got := logDecide(ctx, t, c, key, clock+window, window, limit, 0, limit); got[1] != 0 {
			t.Fatalf("a window after the entries: %v, want the whole limit admitted", got)
		}
	})
}

// TestSlidingLogRealTimeSafety runs random timelines on which the clock
// sometimes steps back (by up to two windows) and checks the guarantee in
// real time: whatever the clock said, no span of a window's length of real
// time holds more than the limit of admitted units. Each call is followed
// by a PERSIST, so that a real server, which expires keys on its own clock,
// keeps what the test clock still counts.
func TestSlidingLogRealTimeSafety(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		for ci, cfg := range []struct{ window, limit int64 }{
			{1e6, 10}, {7300, 100}, {1e6, 1000}, {5e6, 40},
		} {
			script := logScript(cfg.window, cfg.limit, 0)
			if err := script.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			key := prefix(t) + "log"
			// Room to step back, and an hour ahead of the wall clock: the
			// timeline's clock runs slower than real time where it steps
			// back, and a real server deletes a key at once when a script
			// sets an expiry it sees in the past, however slow the machine.
			start := startClock() + 3600e6 + 10*cfg.window
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

// TestSlidingLogUpgrade: an instance of this version honours what an
// instance of the version before (the ZSET log, testdata) admitted on the
// same key, from its first decision and while both run: the older key's
// admissions count at their times, cost included, and are written into the
// new key by its next admission; once the older key is gone, the new one
// stops looking for it. A member of the format before that one (one unit,
// named after its time) counts too.
func TestSlidingLogUpgrade(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		const window, limit = 60e6, 20
		p := prefix(t)
		oldKey, newKey, param := p+"log", p+"sl2:log", int64(len(p))
		old := zsetLogScript(t, window, limit)
		clock := startClock()
		clock -= clock % 1000
		oldDecide := func(at, cost int64) {
			t.Helper()
			got := ints(t, old.Run(ctx, c, []string{oldKey}, singleArgs(at, cost)...).Val())
			if got[1] != 0 {
				t.Fatalf("the older instance: %v, want admitted", got)
			}
		}
		// The older format still: one unit at clock - 1 s.
		if err := c.ZAdd(ctx, oldKey, redis.Z{Score: float64(clock - 1e6), Member: strconv.FormatInt(clock-1e6, 10) + "-x"}).Err(); err != nil {
			t.Fatal(err)
		}
		oldDecide(clock, 1)
		oldDecide(clock+1500, 3)
		// The first decision of the new version counts 5 units.
		got := logDecide(ctx, t, c, newKey, clock+2000, window, limit, param, 1)
		if want := []int64{0, 1, limit - 6, window - 1e6 - 2000, 0}; !slices.Equal(got[1:], want) {
			t.Fatalf("the first decision after the upgrade: %v, want %v", got[1:], want)
		}
		k, _ := readLog(ctx, t, c, newKey)
		if want := []int64{clock - 1e6, clock, clock + 2000, clock + 2000, clock + 2000, clock + 2000}; !slices.Equal(k.body, want) || k.lcum == 0 {
			t.Fatalf("the new key holds %v (lcum %d), want %v and a cum", k.body, k.lcum, want)
		}
		// Both go on: the new one counts the older one's next admissions,
		// and not twice.
		oldDecide(clock+3000, 2)
		got = logDecide(ctx, t, c, newKey, clock+4000, window, limit, param, 1)
		if got[1] != 0 || got[3] != limit-9 {
			t.Fatalf("after the older instance admitted 2 more: %v, want admitted with %d remaining", got, limit-9)
		}
		got = logDecide(ctx, t, c, newKey, clock+5000, window, limit, param, limit-9)
		if got[1] != 0 || got[3] != 0 {
			t.Fatalf("the rest of the limit: %v, want admitted with 0 remaining", got)
		}
		if got = logDecide(ctx, t, c, newKey, clock+5000, window, limit, param, 1); got[1] != 1 || got[5] != window-1e6-5000 {
			t.Fatalf("over the limit: %v, want rejected until the oldest unit leaves", got)
		}
		// The older key is gone: the new one stops looking for it.
		if err := c.Del(ctx, oldKey).Err(); err != nil {
			t.Fatal(err)
		}
		if got = logDecide(ctx, t, c, newKey, clock+window-1e6, window, limit, param, 1); got[1] != 0 {
			t.Fatalf("once the oldest unit left: %v, want admitted", got)
		}
		if k, _ = readLog(ctx, t, c, newKey); k.lcum != 0 {
			t.Fatalf("lcum %d after the older key is gone, want 0", k.lcum)
		}
	})
}

// refLog is a plain sliding log: every admitted unit's time, rounded up to
// the millisecond and never before the newest; the clock never steps back
// in the tests that use it.
type refLog struct {
	at []int64
}

// record adds cost units at now.
func (m *refLog) record(now, cost int64) {
	at := ceilMs(now)
	if n := len(m.at); n > 0 {
		at = max(at, m.at[n-1])
	}
	for range cost {
		m.at = append(m.at, at)
	}
}

// decide returns what an exact sliding log answers at now for a request of
// cost under window and limit: admitted, remaining, reset, retry; and
// records it when admitted and record is true.
func (m *refLog) decide(now, window, limit, cost int64, record bool) (bool, int64, int64, int64) {
	first, _ := slices.BinarySearch(m.at, now-window+1)
	units := int64(len(m.at) - first)
	if units+cost <= limit {
		if record {
			m.record(now, cost) // into an empty window: reset is its own
		}
		reset := window
		if first < len(m.at) {
			reset = m.at[first] + window - now
		}
		return true, limit - units - cost, reset, 0
	}
	k := units + cost - limit
	return false, max(0, limit-units), m.at[first] + window - now, m.at[first+int(k)-1] + window - now
}

// TestSlidingLogRandomExact runs random timelines on one sliding-log key
// (the clock never goes back; many requests share a microsecond or a
// millisecond; costs mix 1 and more; the limit changes between calls, as a
// redeploy would change it, with the key holding more than a lowered
// limit), and compares every reply with the plain model, exactly. Each step
// also runs a Peek first, and sometimes the request goes with a second rule
// that rejects (nothing may be recorded then). From seed 6 on, an instance
// of the version before (the ZSET log) admits requests on the same key
// from the first step on, as the timeline goes, and the model counts them
// too. Each step PERSISTs the
// keys so that the real server never expires what the test clock still
// counts.
func TestSlidingLogRandomExact(t *testing.T) {
	testtier.Long(t)
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
			p := prefix(t)
			key, oldKey, param := p+"sl2:log", p+"log", int64(len(p))
			wall := p + "wall" // the rejecting rule's key
			var m refLog
			clock := startClock()
			limit := base
			var admitted, rejected, older int
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
			old := zsetLogScript(t, window, base)
			for step := range 700 {
				switch r := rng.IntN(20); {
				case r < 5: // the same microsecond
				case r < 7:
					clock += rng.Int64N(1000 - clock%1000) // the same millisecond
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
				cost := int64(1)
				if rng.IntN(5) == 0 {
					cost = 1 + rng.Int64N(min(limit, 5))
				}
				if seed >= 6 && (step == 0 || rng.IntN(4) == 0) {
					// The older instance, on its own count.
					var cmd *redis.Cmd
					if _, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
						cmd = old.Eval(ctx, pipe, []string{oldKey}, singleArgs(clock, cost)...)
						pipe.Persist(ctx, oldKey)
						return nil
					}); err != nil {
						t.Fatalf("seed %d step %d, the older instance: %v", seed, step, err)
					}
					if ints(t, cmd.Val())[1] == 0 {
						m.record(clock, cost)
						older++
					}
					continue
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
				what := fmt.Sprintf("seed %d step %d (clock +%d, limit %d, cost %d, blocked %v)", seed, step, clock-startClockBase(clock), limit, cost, blocked)
				// The Peek: what the rule alone would say, recording nothing.
				pok, prem, preset, pretry := m.decide(clock, window, limit, cost, false)
				checkLogReply(t, what+" Peek", l[2:6], pok, prem, preset, pretry, cost, true)
				ok, rem, reset, retry := m.decide(clock, window, limit, cost, !blocked)
				rule1 := got[2:6]
				if blocked {
					if want := 2 - b2i(!ok); got[1] != want {
						t.Fatalf("%s: fired %d, want %d", what, got[1], want)
					}
					checkLogReply(t, what, rule1, ok, rem, reset, retry, cost, true)
					continue
				}
				if (got[1] == 0) != ok {
					k, _ := readLog(ctx, t, c, key)
					t.Fatalf("%s: reply %v, model admits %v (remaining %d, reset %d, retry %d)\nkey %+v", what, got[1:], ok, rem, reset, retry, k)
				}
				if ok {
					admitted++
				} else {
					rejected++
				}
				checkLogReply(t, what, rule1, ok, rem, reset, retry, cost, false)
				if k, ok := readLog(ctx, t, c, key); ok {
					k.live(t, clock, window)
				}
			}
			t.Logf("seed %d: %d admitted, %d rejected, %d admitted by the older instance", seed, admitted, rejected, older)
			if admitted < 50 || rejected < 50 || seed >= 6 && older < 20 {
				t.Errorf("seed %d: %d admitted, %d rejected, %d by the older instance: the timeline does not exercise them", seed, admitted, rejected, older)
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
// admissible request's report is the key's state without it: the model's
// remaining plus its cost.
func checkLogReply(t *testing.T, what string, got []int64, ok bool, rem, reset, retry, cost int64, unrecorded bool) {
	t.Helper()
	if (got[0] == 1) != ok {
		t.Fatalf("%s: ok %d, model %v (remaining %d reset %d retry %d)", what, got[0], ok, rem, reset, retry)
	}
	if ok && unrecorded {
		rem += cost
	}
	if got[1] != rem || got[2] != reset || got[3] != retry {
		t.Fatalf("%s: ok %v, remaining %d reset %d retry %d; model %d %d %d", what, ok, got[1], got[2], got[3], rem, reset, retry)
	}
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
