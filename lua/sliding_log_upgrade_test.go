package lua

// Tests of the sliding log's upgrade from a large ZSET log (the key the
// version before kept, sliding_log.lua's Upgrade): what one decision costs
// Redis, counted by Redis itself, and that the imported count never admits
// more than the older format would.

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// zsetMember is a member of the ZSET log as the version before wrote it: at
// (µs) and cum in 7 bytes each, units in 4, and the cost in 4 more when it
// is not 1.
func zsetMember(at, cum, units, cost int64) string {
	b := make([]byte, 8, 22)
	binary.BigEndian.PutUint64(b, uint64(at))
	b = b[1:]
	var x [8]byte
	binary.BigEndian.PutUint64(x[:], uint64(cum))
	b = append(b, x[1:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(units))
	if cost != 1 {
		b = binary.BigEndian.AppendUint32(b, uint32(cost))
	}
	return string(b)
}

// fillZSET writes a ZSET log under key with one member per time in ats
// (µs, ascending), of the costs in costs (cycled), as the version before
// would have admitted them, and returns its units.
func fillZSET(ctx context.Context, t *testing.T, c *redis.Client, key string, ats, costs []int64) int64 {
	t.Helper()
	var cum int64
	// 5,000 members a ZADD, one at a time: a loaded machine must not time
	// out a pipeline of them all.
	batch := make([]redis.Z, 0, 5000)
	for i, at := range ats {
		cost := costs[i%len(costs)]
		cum += cost
		batch = append(batch, redis.Z{Score: float64(at), Member: zsetMember(at, cum, cum, cost)})
		if len(batch) == cap(batch) || i == len(ats)-1 {
			if err := c.ZAdd(ctx, key, batch...).Err(); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return cum
}

// zsetRead is one read of the older key that a script made, as MONITOR
// saw it: the command and its arguments after the key.
type zsetRead struct {
	cmd  string
	args []string
}

// members is the most members the read can return: a range of ranks, or
// -1 for a range of scores, which can return the whole key.
func (r zsetRead) members(t *testing.T) int64 {
	t.Helper()
	switch r.cmd {
	case "zcount", "exists", "zcard":
		return 0
	case "zrange", "zrevrange":
		from, err1 := strconv.ParseInt(r.args[0], 10, 64)
		to, err2 := strconv.ParseInt(r.args[1], 10, 64)
		if err1 != nil || err2 != nil || (from < 0) != (to < 0) {
			t.Fatalf("%s %v: not a range of ranks of one sign", r.cmd, r.args)
		}
		return max(0, to-from+1)
	}
	return -1
}

// quoted matches one argument of a MONITOR line.
var quoted = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// readsOf runs f while MONITOR watches the server c talks to, and returns
// the commands on key that scripts ran meanwhile. It waits for a marker
// that it sends after f, not for a deadline: MONITOR sends each command in
// the order the server ran it.
func readsOf(ctx context.Context, t *testing.T, c *redis.Client, key string, f func()) []zsetRead {
	t.Helper()
	conn, err := net.Dial("tcp", c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Only so that a broken server cannot hang the test.
	_ = conn.SetDeadline(time.Now().Add(5 * time.Minute))
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	f()
	marker := "readsOf-done-" + key
	if err := c.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	var out []zsetRead
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		if strings.Contains(line, marker) {
			return out
		}
		if !strings.Contains(line, " lua] ") {
			continue
		}
		var words []string
		for _, m := range quoted.FindAllStringSubmatch(line, -1) {
			words = append(words, m[1])
		}
		if len(words) >= 2 && words[1] == key {
			out = append(out, zsetRead{strings.ToLower(words[0]), words[2:]})
		}
	}
}

// membersRead sums what the reads can return, and fails t for a read of a
// range of scores, which can return the whole key.
func membersRead(t *testing.T, reads []zsetRead) int64 {
	t.Helper()
	var n int64
	for _, r := range reads {
		m := r.members(t)
		if m < 0 {
			t.Fatalf("%s %v: a read that can return the whole older key", r.cmd, r.args)
		}
		n += m
	}
	return n
}

// usec runs f after resetting Redis's statistics and returns the Redis
// time of the scripts it ran (INFO commandstats) and the counts of the
// commands.
func usec(ctx context.Context, t *testing.T, c *redis.Client, f func()) (int64, map[string]int64) {
	t.Helper()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	f()
	n := commandCalls(ctx, t, c)
	return n["evalsha usec"], n
}

// TestSlidingLogUpgradeOfALargeZSET: an older key of 100,000 members, the
// whole limit, is upgraded by the first decision on it, refused or not, in
// one bounded pass: it reads at most a few hundred members (MONITOR shows
// every read a script makes), and writes the new key with every unit; the
// decisions after it read the older key's 8 newest members at most, and write
// nothing. Their Redis time (INFO commandstats) is compared with that of
// the same work on a key of this version, measured in the same test on
// the same server: an admission of cost 100,000, which writes as many
// bytes, and a refusal. The count it imported never admits more than the
// older key would: before any unit leaves, nothing; later, at most what
// has left.
func TestSlidingLogUpgradeOfALargeZSET(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const window, limit, members = 3600e6, 100_000, 100_000
	clock := startClock()
	clock -= clock % 1000
	p := prefix(t)
	param := int64(len(p))
	for _, s := range []*redis.Script{logScript(window, limit, param), logScript(window, limit, 0)} {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// One member every 10 ms, from 1,000 s before clock.
	ats := make([]int64, members)
	for i := range ats {
		ats[i] = clock - 1000e6 + int64(i)*10e3
	}
	var first, base []int64
	firstTouch := func(tag string) {
		t.Helper()
		old := p + "log" + tag
		fillZSET(ctx, t, c, old, ats, []int64{1})
		var got []int64
		measure := func() {
			took, _ := usec(ctx, t, c, func() {
				got = logDecide(ctx, t, c, p+"sl2:log"+tag, clock, window, limit, param, 1)
			})
			first = append(first, took)
		}
		if tag != "m" {
			measure()
		} else {
			// MONITOR, which costs Redis time of its own: reads only.
			reads := readsOf(ctx, t, c, old, measure)
			first = first[:len(first)-1]
			read := membersRead(t, reads)
			t.Logf("first touch: %d reads of the older key, returning at most %d members", len(reads), read)
			if read > 400 {
				t.Fatalf("the first touch read up to %d members of the older key, want a bounded pass of a few hundred", read)
			}
		}
		if got[1] != 1 || got[3] != 0 || got[5] < ats[0]+window-clock {
			t.Fatalf("the first decision on a full older key: %v, want refused, 0 remaining, retry no sooner than the oldest member leaves (%d)", got[1:], ats[0]+window-clock)
		}
	}
	firstTouch("m")
	for try := range 3 {
		tag := string(rune('a' + try))
		took, _ := usec(ctx, t, c, func() {
			if got := logDecide(ctx, t, c, p+"heavy"+tag, clock, window, limit, 0, limit); got[1] != 0 {
				t.Fatalf("an admission of cost %d on a fresh key: %v", limit, got)
			}
		})
		base = append(base, took)
		firstTouch(tag)
	}
	// Each first touch against the admission measured just before it: on
	// a loaded machine, Redis's own time varies with the load, less so
	// within a pair.
	ratios := make([]float64, len(first))
	for i := range first {
		ratios[i] = float64(first[i]) / float64(max(base[i], 1))
	}
	t.Logf("first touch of a 100,000-member key: Redis time %v µs; an admission of cost 100,000 on a fresh key just before each: %v µs", first, base)
	if slices.Min(ratios) > 10 {
		t.Errorf("the first touch of a 100,000-member key: Redis time %v µs, each more than 10 times an admission of cost 100,000 just before it (%v µs)", first, base)
	}
	newKey := p + "sl2:loga"
	k, ok := readLog(ctx, t, c, newKey)
	if !ok || k.n != limit || k.lcum != limit {
		t.Fatalf("after a refused first touch: key %v with %d entries and lcum %d, want the %d units written with the newest member's cum", ok, k.n, k.lcum, limit)
	}
	// Every unit no sooner than its member: never counted out before the
	// older key would.
	for i, at := range k.body {
		if at < ceilMs(ats[i]) {
			t.Fatalf("unit %d imported at %d, before its member's %d", i, at, ats[i])
		}
	}
	// The decisions after it: the older key's 8 newest members, no more.
	const later = 20
	refuse := func(key string, param int64) func() {
		return func() {
			for i := range int64(later) {
				if got := logDecide(ctx, t, c, key, clock+i*1000, window, limit, param, 1); got[1] != 1 || got[3] != 0 {
					t.Fatalf("%s: decision %d: %v, want refused with 0 remaining", key, i, got)
				}
			}
		}
	}
	// Three rounds, each against a full key of this version just before
	// it: on a loaded machine, Redis's own time varies with the load.
	ratios = ratios[:0]
	for range 3 {
		plain, _ := usec(ctx, t, c, refuse(p+"heavya", 0))
		after, n := usec(ctx, t, c, refuse(newKey, param))
		t.Logf("%d refusals after the first touch: %.0f µs of Redis time per call; on a full key of this version: %.0f µs (%v)", later, float64(after)/later, float64(plain)/later, n)
		if n["set"]+n["setrange"] != 0 {
			t.Fatalf("%d refusals after the first touch wrote %d times, want no write", later, n["set"]+n["setrange"])
		}
		ratios = append(ratios, float64(after)/float64(max(plain, 1)))
	}
	if slices.Min(ratios) > 10 {
		t.Errorf("refusals after the first touch: each round more than 10 times the Redis time of refusals on a full key of this version (%v)", ratios)
	}
	reads := readsOf(ctx, t, c, p+"loga", refuse(newKey, param))
	if read := membersRead(t, reads); read > 8*later {
		t.Fatalf("%d refusals after the first touch read up to %d members of the older key: want its 8 newest at most", later, read)
	}
	// Once half the members have left the window, the new key admits at
	// most what has left, and, as a unit counts no later than the group of
	// members it was imported with (a 64th of them), no fewer than that
	// less 2%.
	now := ats[members/2] + window
	gone := int64(members/2 + 1)
	got := logDecide(ctx, t, c, newKey, now, window, limit, param, 1)
	if got[1] != 0 || got[3] > gone-1 || got[3] < gone-1-limit/50 {
		t.Fatalf("once %d members have left: %v, want admitted with at most %d remaining (and at least %d)", gone, got, gone-1, gone-1-limit/50)
	}
	t.Logf("once %d units of the older key have left: %d remaining after an admission", gone, got[3])
}

// TestSlidingLogUpgradeWhileTheOlderVersionAdmitsMany: during a rolling
// deploy, an instance of the version before (its script, testdata) admits
// 1,000 requests of cost 2 on a key this version already imported; the
// next decision of this version imports them in a bounded pass (MONITOR
// shows its reads), counts them exactly, and later counts none of them out
// of the window before the older key would; then a few more are imported
// one by one, exactly.
func TestSlidingLogUpgradeWhileTheOlderVersionAdmitsMany(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const window, limit = 3600e6, 100_000
	clock := startClock()
	clock -= clock % 1000
	p := prefix(t)
	param := int64(len(p))
	oldKey, newKey := p+"log", p+"sl2:log"
	old := zsetLogScript(t, window, limit)
	if err := old.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	// units holds the time (µs) of every unit admitted, by either version.
	var units []int64
	ats := make([]int64, 50_000)
	for i := range ats {
		ats[i] = clock - 1000e6 + int64(i)*10e3
		units = append(units, ats[i])
	}
	fillZSET(ctx, t, c, oldKey, ats, []int64{1})
	if got := logDecide(ctx, t, c, newKey, clock, window, limit, param, 1); got[1] != 0 || got[3] != limit-50_001 {
		t.Fatalf("the first decision: %v, want admitted with %d remaining", got, limit-50_001)
	}
	units = append(units, clock)
	olderAdmits := func(n int, cost, from int64) {
		t.Helper()
		pipe := c.Pipeline()
		for i := range int64(n) {
			old.EvalSha(ctx, pipe, []string{oldKey}, singleArgs(from+i*1000, cost)...)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			if got := ints(t, cmd.(*redis.Cmd).Val()); got[1] != 0 {
				t.Fatalf("the older instance's request %d: %v, want admitted", i, got)
			}
			for range cost {
				units = append(units, from+int64(i)*1000)
			}
		}
	}
	olderAdmits(1000, 2, clock+1000)
	var got []int64
	reads := readsOf(ctx, t, c, oldKey, func() {
		got = logDecide(ctx, t, c, newKey, clock+2e6, window, limit, param, 1)
	})
	units = append(units, clock+2e6)
	read := membersRead(t, reads)
	t.Logf("after the older instance admitted 1,000 requests: %d reads of the older key, returning at most %d members", len(reads), read)
	if want := int64(limit - len(units)); got[1] != 0 || got[3] != want {
		t.Fatalf("after the older instance admitted 2,000 units: %v, want admitted with %d remaining", got, want)
	}
	if read > 400 {
		t.Fatalf("the decision read up to %d members of the older key, want a bounded pass of a few hundred", read)
	}
	if k, _ := readLog(ctx, t, c, newKey); k.n != int64(len(units)) || k.lcum != 52_000 {
		t.Fatalf("the new key holds %d entries (lcum %d), want %d and the older key's newest cum, 52000", k.n, k.lcum, len(units))
	}
	// A few more: one by one, at their own times.
	olderAdmits(3, 1, clock+3e6)
	got = logDecide(ctx, t, c, newKey, clock+4e6, window, limit, param, 1)
	units = append(units, clock+4e6)
	if want := int64(limit - len(units)); got[1] != 0 || got[3] != want {
		t.Fatalf("after the older instance admitted 3 more: %v, want admitted with %d remaining", got, want)
	}
	// Half of the 1,000 have left: what remains is at most the exact
	// count's, and short of it by at most one group of members (a 64th).
	now := clock + 1000 + 500*1000 + window
	var in int64
	for _, at := range units {
		if ceilMs(at) > now-window {
			in++
		}
	}
	got = logDecide(ctx, t, c, newKey, now, window, limit, param, 1)
	exact := limit - in - 1
	t.Logf("once half the 1,000 have left: %d remaining after an admission, exactly %d", got[3], exact)
	if got[1] != 0 || got[3] > exact || got[3] < exact-2*(1000/64+1) {
		t.Fatalf("once half the 1,000 have left: %v, want admitted with at most %d remaining, and at least %d", got, exact, exact-2*(1000/64+1))
	}
}

// TestSlidingLogUpgradeRefusedAtMaxmemory: with maxmemory full and
// noeviction, a refused decision on a full older key is still answered, a
// refusal, by the single-rule and the several-rule script: the write of
// what it imported is its first write, which Redis refuses, and the
// decision stands without it. Once memory is free again, the next refusal
// writes it.
func TestSlidingLogUpgradeRefusedAtMaxmemory(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const window, limit = 60e6, 3
	clock := startClock()
	clock -= clock % 1000
	p := prefix(t)
	param := int64(len(p))
	oldKey, newKey := p+"log", p+"sl2:log"
	fillZSET(ctx, t, c, oldKey, []int64{clock - 3e6, clock - 2e6, clock - 1e6}, []int64{1})
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1mb"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		err := c.Set(ctx, p+"fill:"+strconv.Itoa(i), strings.Repeat("x", 64<<10), 0).Err()
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
	r := rule{alg: 0, window: window, limit: limit, param: param, cost: 1}
	reply, err := redis.NewScript(Several()).Run(ctx, c, []string{newKey}, args(clock, r)...).Result()
	if err != nil || ints(t, reply)[1] != 1 {
		t.Fatalf("several, at maxmemory: %v, %v; want refused", reply, err)
	}
	reply, err = logScript(window, limit, param).Run(ctx, c, []string{newKey}, singleArgs(clock, 1)...).Result()
	if err != nil || ints(t, reply)[1] != 1 {
		t.Fatalf("single, at maxmemory: %v, %v; want refused", reply, err)
	}
	if n := c.Exists(ctx, newKey).Val(); n != 0 {
		t.Fatalf("the new key was written at maxmemory")
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if got := logDecide(ctx, t, c, newKey, clock, window, limit, param, 1); got[1] != 1 {
		t.Fatalf("with memory free: %v, want refused", got)
	}
	if k, ok := readLog(ctx, t, c, newKey); !ok || k.n != limit || k.lcum != limit {
		t.Fatalf("with memory free, after a refusal: key %v with %d entries, lcum %d; want the %d imported", ok, k.n, k.lcum, limit)
	}
}
