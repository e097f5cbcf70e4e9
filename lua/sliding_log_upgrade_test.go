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
	case "zcount", "exists", "zcard", "zrank":
		return 0
	case "zrangebyscore":
		if n := len(r.args); n >= 3 && strings.EqualFold(r.args[n-3], "limit") {
			if c, err := strconv.ParseInt(r.args[n-1], 10, 64); err == nil {
				return c
			}
		}
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

// slowestCalls runs f with every command in Redis's SLOWLOG and returns
// the Redis time (µs) of each script call f made, in order: Redis's own
// count per call, not the wall clock of a loaded machine.
func slowestCalls(ctx context.Context, t *testing.T, c *redis.Client, f func()) []int64 {
	t.Helper()
	for _, kv := range [][2]string{{"slowlog-max-len", "10000"}, {"slowlog-log-slower-than", "0"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	f()
	logs, err := c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, l := range slices.Backward(logs) {
		if len(l.Args) > 0 && strings.HasPrefix(strings.ToLower(l.Args[0]), "eval") {
			out = append(out, l.Duration.Microseconds())
		}
	}
	return out
}

// upgradeStart is how each upgrade test begins: a client of a
// redis-server of its own, a test clock (µs) on a whole millisecond, and a
// key prefix with its length (the scripts' param). The older version's key
// is p+"log", this version's p+"sl2:log".
func upgradeStart(t *testing.T) (ctx context.Context, c *redis.Client, clock int64, p string, param int64) {
	t.Helper()
	c = redistest.Start(t).Client()
	clock = startClock() // after the start, which a loaded machine slows
	p = prefix(t)
	return context.Background(), c, clock - clock%1000, p, int64(len(p))
}

// TestSlidingLogUpgradeOfALargeZSET: an older key of 100,000 members, the
// whole limit and the largest a sliding log takes, is upgraded by the
// first decision on it, refused or not, without importing its members: it
// writes a header that counts them from the older key (cum), and reads a
// handful of members (MONITOR shows every read a script makes). Every
// decision after it counts the older key's units in the window exactly,
// to the member: refused while they fill the limit, admitted with the
// exact remaining as they leave, each refusal's retry the moment its unit
// leaves, and none of them once they all have. No call on the key costs
// Redis more than 4× a bare 400 KB string (SLOWLOG, per call; the bound of
// TestSlidingLogHeavyDecisions), its best of three rounds, each on a fresh
// key.
func TestSlidingLogUpgradeOfALargeZSET(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	const window, limit, members = 3600e6, 100_000, 100_000
	ctx, c, clock, p, param := upgradeStart(t)
	floorScript := redis.NewScript(`redis.call('DEL', KEYS[1]) redis.call('SETRANGE', KEYS[1], tonumber(ARGV[1]) - 1, 'x') return 1`)
	for _, s := range []*redis.Script{logScript(window, limit, param), floorScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// One member every 10 ms, from 1,000 s before clock.
	ats := make([]int64, members)
	for i := range ats {
		ats[i] = clock - 1000e6 + int64(i)*10e3
	}
	decide := func(key string, now, cost int64, want ...int64) {
		t.Helper()
		if got := logDecide(ctx, t, c, key, now, window, limit, param, cost); !slices.Equal(got[1:], want) {
			t.Fatalf("cost %d at %d µs after clock: %v, want fired, not ok, remaining, reset, retry %v", cost, now-clock, got[1:], want)
		}
	}
	// The calls, and what Redis answers to each: the first touch, refused
	// until the oldest member leaves; 20 refusals; once half the members
	// have left, admissions up to the limit exactly, and refusals whose
	// retry is when their unit leaves (the 500th from the oldest: 500
	// members on); once all have left, only this key's own units count.
	half := ats[members/2] + window
	gone := int64(members/2 + 1)
	calls := func(key string) {
		decide(key, clock, 1, 1, 0, 0, ats[0]+window-clock, ats[0]+window-clock)
		for i := range int64(20) {
			now := clock + i*1000
			decide(key, now, 1, 1, 0, 0, ats[0]+window-now, ats[0]+window-now)
		}
		next := ats[gone] + window - half
		decide(key, half, 1, 0, 1, gone-1, next, 0)
		decide(key, half, gone, 1, 0, gone-1, next, next)
		decide(key, half, gone+499, 1, 0, gone-1, next, ats[gone+499]+window-half)
		decide(key, half, 100, 0, 1, gone-101, next, 0)
		if k, ok := readLog(ctx, t, c, key); !ok || k.hdr == "" || k.n != 101 || k.lcum != members {
			t.Fatalf("after 101 units admitted: key %v, header %q, %d entries, lcum %d; want the header, 101 entries and the older key's newest cum", ok, k.hdr, k.n, k.lcum)
		}
		end := ats[members-1] + window
		decide(key, end, 1, 0, 1, limit-102, half+window-end, 0)
		if k, ok := readLog(ctx, t, c, key); !ok || k.hdr != "" || k.n != 106 || k.tail != 4 {
			t.Fatalf("once the older key's units have all left: key %v, header %q, %d entries from tail %d; want no header, its 4 entries dead, and 102 more", ok, k.hdr, k.n, k.tail)
		}
	}
	k := p + "sl2:logm"
	fillZSET(ctx, t, c, p+"logm", ats, []int64{1})
	reads := readsOf(ctx, t, c, p+"logm", func() { decide(k, clock, 1, 1, 0, 0, ats[0]+window-clock, ats[0]+window-clock) })
	read := membersRead(t, reads)
	t.Logf("first touch: %d reads of the older key, returning at most %d members", len(reads), read)
	if read > 16 {
		t.Fatalf("the first touch read up to %d members of the older key, want a bounded pass of a few", read)
	}
	if k, ok := readLog(ctx, t, c, k); !ok || k.hdr == "" || k.n != 0 || k.lcum != members {
		t.Fatalf("after a refused first touch: key %v, header %q, %d entries, lcum %d; want a header alone and the older key's newest cum", ok, k.hdr, k.n, k.lcum)
	}
	// The calls after it: at most 8 + 1 + 18 members each (the 8 newest,
	// the oldest in the window, and a retry's search by rank).
	reads = readsOf(ctx, t, c, p+"logm", func() { calls(k) })
	read = membersRead(t, reads)
	t.Logf("%d calls after the first touch: %d reads of the older key, returning at most %d members", 26, len(reads), read)
	if read > 27*26 {
		t.Fatalf("26 calls read up to %d members of the older key, want 27 a call at most", read)
	}
	// Each call's best of three rounds, each on a fresh key, against the
	// best of three bare 400 KB strings, one before each round: on a loaded
	// machine, Redis's own time varies with the load.
	var best, floors []int64
	for round := range 3 {
		tag := strconv.Itoa(round)
		fillZSET(ctx, t, c, p+"log"+tag, ats, []int64{1})
		floors = append(floors, slowestCalls(ctx, t, c, func() {
			if err := floorScript.Run(ctx, c, []string{p + "floor"}, 4*limit).Err(); err != nil {
				t.Fatal(err)
			}
		})...)
		took := slowestCalls(ctx, t, c, func() { calls(p + "sl2:log" + tag) })
		t.Logf("round %d: Redis time per call on the upgraded key %v µs; a bare 400 KB string %d µs", round, took, floors[round])
		if best == nil {
			best = took
		}
		for i := range best {
			best[i] = min(best[i], took[i])
		}
	}
	floor := slices.Min(floors)
	t.Logf("each call's best of 3: %v µs, the slowest %d µs (the first touch %d µs); a bare 400 KB string %d µs: %.2f×",
		best, slices.Max(best), best[0], floor, float64(slices.Max(best))/float64(max(floor, 1)))
	if slices.Max(best) > 4*max(floor, 100) {
		t.Errorf("a call on the upgraded key cost Redis %d µs, its best of 3, more than 4× a bare 400 KB string's %d µs (or 100 µs)", slices.Max(best), floor)
	}
}

// TestSlidingLogUpgradeWhileTheOlderVersionAdmitsMany: during a rolling
// deploy, an instance of the version before (its script, testdata) admits
// 1,000 requests of cost 2 on a key this version already upgraded; the
// next decision of this version imports them in a bounded pass (MONITOR
// shows its reads), counts them exactly, and later counts none of them out
// of the window before the older key would; then a few more are imported
// one by one, exactly.
func TestSlidingLogUpgradeWhileTheOlderVersionAdmitsMany(t *testing.T) {
	t.Parallel()
	const window, limit = 3600e6, 100_000
	ctx, c, clock, p, param := upgradeStart(t)
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
	// The first 50,000 are counted by the header, from the older key.
	if k, _ := readLog(ctx, t, c, newKey); k.hdr == "" || k.n != int64(len(units))-50_000 || k.lcum != 52_000 {
		t.Fatalf("the new key holds header %q and %d entries (lcum %d), want a header, %d entries and the older key's newest cum, 52000", k.hdr, k.n, k.lcum, len(units)-50_000)
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
	const window, limit = 60e6, 3
	ctx, c, clock, p, param := upgradeStart(t)
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

// TestSlidingLogUpgradeOfAWeightedZSET: an older key of 60,000 members of
// cost 2, 120,000 units (a limit the older version ran under was
// larger), upgraded by a header that counts its newest 100,000 units:
// each decision counts them exactly, unit by unit, from the older key's
// cum, and a refusal's retry is when its unit leaves, found by rank (one
// member holds two units); Peek and the several-rule script count the
// same.
func TestSlidingLogUpgradeOfAWeightedZSET(t *testing.T) {
	t.Parallel()
	const window, limit, members = 3600e6, 100_000, 60_000
	ctx, c, clock, p, param := upgradeStart(t)
	ats := make([]int64, members)
	for i := range ats {
		ats[i] = clock - 1000e6 + int64(i)*10e3
	}
	fillZSET(ctx, t, c, p+"log", ats, []int64{2})
	key := p + "sl2:log"
	decide := func(now, cost int64, want ...int64) {
		t.Helper()
		if got := logDecide(ctx, t, c, key, now, window, limit, param, cost); !slices.Equal(got[1:], want) {
			t.Fatalf("cost %d at %d µs after clock: %v, want fired, not ok, remaining, reset, retry %v", cost, now-clock, got[1:], want)
		}
	}
	// The newest 100,000 units start at unit 20,001: member 10,000's.
	decide(clock, 1, 1, 0, 0, ats[10_000]+window-clock, ats[10_000]+window-clock)
	if k, ok := readLog(ctx, t, c, key); !ok || k.hdr == "" || k.n != 0 || k.lcum != 2*members {
		t.Fatalf("after the first touch: key %v, header %q, %d entries, lcum %d; want a header alone and lcum %d", ok, k.hdr, k.n, k.lcum, 2*members)
	}
	// Members 0 to 30,000 have left: 59,998 units remain, from member
	// 30,001's.
	now := ats[30_000] + window
	reset := ats[30_001] + window - now
	// The several-rule scripts count the same: Peek, which records
	// nothing, then Several, which admits.
	r := rule{alg: 0, window: window, limit: limit, param: param, cost: 1}
	for _, sc := range []struct {
		name, src string
		want      []int64
	}{{"peek", Peek(), []int64{0, 1, limit - 59_998, reset, 0}}, {"several", Several(), []int64{0, 1, limit - 59_998 - 1, reset, 0}}} {
		reply, err := redis.NewScript(sc.src).Run(ctx, c, []string{key}, args(now, r)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := ints(t, reply); !slices.Equal(got[1:], sc.want) {
			t.Fatalf("%s at %d µs after clock: %v, want fired, ok, remaining, reset, retry %v", sc.name, now-clock, got[1:], sc.want)
		}
	}
	// The 6th unit from the oldest is member 30,003's (units 5 and 6).
	decide(now, 40_007, 1, 0, limit-59_998-1, reset, ats[30_003]+window-now)
	decide(now, 40_001, 0, 1, 0, reset, 0)
	decide(now, 1, 1, 0, 0, reset, reset)
}

// TestSlidingLogUpgradeOfAnOldestFormatZSET: an older key of 300 members
// of the oldest format (no cum, one unit each, named after its time) is
// upgraded by a header of kind 2: its 300 units at its newest member's
// time, as the import of 64 groups counted them, until that time leaves
// the window.
func TestSlidingLogUpgradeOfAnOldestFormatZSET(t *testing.T) {
	t.Parallel()
	const window, limit, members = 60e6, 300, 300
	ctx, c, clock, p, param := upgradeStart(t)
	for i := range int64(members) {
		at := clock - 50e6 + i*1000
		if err := c.ZAdd(ctx, p+"log", redis.Z{Score: float64(at), Member: strconv.FormatInt(at, 10) + "-x"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	key, newest := p+"sl2:log", clock-50e6+(members-1)*1000
	if got := logDecide(ctx, t, c, key, clock, window, limit, param, 1); !slices.Equal(got[1:], []int64{1, 0, 0, newest + window - clock, newest + window - clock}) {
		t.Fatalf("the first touch: %v, want refused until the newest member leaves (%d µs)", got[1:], newest+window-clock)
	}
	if k, ok := readLog(ctx, t, c, key); !ok || k.hdr == "" || k.hdr[0] != 2 || k.n != 0 {
		t.Fatalf("after the first touch: key %v, header %q, %d entries; want a header of kind 2 alone", ok, k.hdr, k.n)
	}
	if got := logDecide(ctx, t, c, key, newest+window, window, limit, param, limit); got[1] != 0 || got[3] != 0 {
		t.Fatalf("once the newest member has left: %v, want the whole limit admitted", got[1:])
	}
}

// TestSlidingLogUpgradeWhileTheOlderVersionAdmitsInBulk: during a rolling
// deploy, an instance of the version before admits 10 requests of cost
// 2,000 on a key this version already holds entries in; the decisions of
// this version after it copy them 4,096 units a call at most (the key's
// growth), the oldest first, while each counts all of them exactly and
// admits what the limit allows; a refusal's retry is no sooner than the
// copy would let its unit leave. Once all are copied, lcum is the older
// key's newest cum; no unit leaves sooner than its member would, those
// copied after this key's newer entries later.
func TestSlidingLogUpgradeWhileTheOlderVersionAdmitsInBulk(t *testing.T) {
	t.Parallel()
	const window, limit = 3600e6, 30_000
	ctx, c, clock, p, param := upgradeStart(t)
	oldKey, newKey := p+"log", p+"sl2:log"
	old := zsetLogScript(t, window, limit)
	fillZSET(ctx, t, c, oldKey, []int64{clock - 2e6, clock - 1e6}, []int64{1})
	if got := logDecide(ctx, t, c, newKey, clock, window, limit, param, 1); got[1] != 0 || got[3] != limit-3 {
		t.Fatalf("the first decision: %v, want admitted with %d remaining", got, limit-3)
	}
	for i := range int64(10) {
		if got := ints(t, old.Run(ctx, c, []string{oldKey}, singleArgs(clock+1000+i*1000, 2000)...).Val()); got[1] != 0 {
			t.Fatalf("the older instance's request %d: %v, want admitted", i, got)
		}
	}
	counted := int64(3 + 20_000)
	k0, _ := readLog(ctx, t, c, newKey)
	var took []int64 // Redis time per call (µs)
	for call := int64(0); ; call++ {
		if call > 5 {
			t.Fatalf("after %d calls: lcum %d, want the older key's newest cum, %d", call, k0.lcum, 20_002)
		}
		now := clock + 2e6 + call*1000
		var got []int64
		took = append(took, slowestCalls(ctx, t, c, func() {
			got = logDecide(ctx, t, c, newKey, now, window, limit, param, 1)
		})...)
		counted++
		if got[1] != 0 || got[3] != limit-counted {
			t.Fatalf("call %d: %v, want admitted with %d remaining", call, got, limit-counted)
		}
		k, _ := readLog(ctx, t, c, newKey)
		if grew := k.n - k0.n; grew < 1 || grew > 4096+1 {
			t.Fatalf("call %d wrote %d entries, want 1 to 4,097", call, grew)
		}
		k0 = k
		if k.lcum == 20_002 {
			if k.n != counted {
				t.Fatalf("all copied after call %d: %d entries, want %d", call, k.n, counted)
			}
			t.Logf("the calls that copied 20,000 units: Redis time %v µs", took)
			break
		}
	}
	// A refusal whose unit is the last of them: retry no sooner than the
	// key's newest entry leaves, as it was copied after it.
	now := clock + 3e6
	got := logDecide(ctx, t, c, newKey, now, window, limit, param, limit)
	if got[1] != 1 || got[3] != limit-counted || got[5] < k0.body[k0.n-1]+window-now {
		t.Fatalf("a refusal of cost %d: %v, want refused with %d remaining, retry no sooner than %d", limit, got, limit-counted, k0.body[k0.n-1]+window-now)
	}
	// Once the older instance's members have left, the first 4,096 units,
	// copied at their members' times, have left too; the others, copied
	// after this key's own newer entries, still count: never fewer than
	// the older key's count.
	now = clock + 11_000 + window
	got = logDecide(ctx, t, c, newKey, now, window, limit, param, 1)
	t.Logf("once the older instance's members have left: %d remaining after an admission; by the older key's count, %d", got[3], limit-5-1)
	if got[1] != 0 || got[3] != limit-counted+3+4096-1 {
		t.Fatalf("once the older instance's members have left: %v, want admitted with %d remaining", got, limit-counted+3+4096-1)
	}
}
