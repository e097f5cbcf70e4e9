package ginlimit

// Tests against a real three-master Redis Cluster started by the test
// (internal/redistest.StartCluster): keys spread over the masters, every
// algorithm stays exact, several rules are decided in one slot, and a
// master that goes away fails only its own keys.

import (
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"

	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
	"github.com/ginlimit/ginlimit/lua"
)

// TestClusterKeysSpread: IP decisions for 300 clients write 300 keys, each
// on the master that serves its slot, and all three masters get a share:
// the hash tag holds the identity, not just the route.
func TestClusterKeysSpread(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	pre := prefix(t)
	e := gin.New()
	e.GET("/x", testLimit(Redis(cl.Client()), Key(pre), Type(IP), Window(time.Minute), Limit(5)), ok)
	const clients = 300
	want := make([][]string, 3) // the keys each master should hold
	for i := range clients {
		ip := fmt.Sprintf("10.0.%d.%d", i/256, i%256)
		w := do(e, http.MethodGet, "/x", map[string]string{"RemoteAddr": ip + ":40000"})
		if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("client %s: %d %v %s", ip, w.Code, w.Header(), w.Body)
		}
		key := pre + rule.SlidingLogTag + "{GET /x ip:" + ip + "}"
		m := cl.MasterForKey(key)
		want[m] = append(want[m], key)
	}
	ctx := context.Background()
	for m := range want {
		var got []string
		iter := cl.NodeClient(m).Scan(ctx, 0, pre+"*", 1000).Iterator()
		for iter.Next(ctx) {
			got = append(got, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		slices.Sort(want[m])
		if !slices.Equal(got, want[m]) {
			t.Fatalf("master %d holds %d keys %q,\nwant the %d whose slot it serves %q", m, len(got), got, len(want[m]), want[m])
		}
		// About 100 each; 50 is more than six standard deviations below.
		if len(got) < 50 {
			t.Fatalf("master %d holds %d of %d keys; the keys do not spread", m, len(got), clients)
		}
		t.Logf("master %d holds %d keys", m, len(got))
	}
}

// TestClusterExactUnderConcurrency: 64 goroutines over three cluster
// clients (three app instances) race for a limit of 500 on one key: every
// algorithm admits exactly 500, with and without the deny cache and the
// cluster client's auto-pipelining, and the key holds exactly 500.
func TestClusterExactUnderConcurrency(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	clients := []*redis.ClusterClient{cl.Client(), cl.Client(), cl.Client()}
	hooks := make([]*pipelineCounter, len(clients))
	for i, c := range clients {
		hooks[i] = &pipelineCounter{}
		c.AddHook(hooks[i])
	}
	fixed := windowFarFromBoundary(t, clients[0], time.Hour)
	for _, tc := range []struct {
		name string
		opts []Option
		pipe bool
	}{
		{"sliding log", []Option{DenyCache(0)}, false},
		{"sliding log, deny cache", nil, false},
		{"sliding log, autopipeline (falls back on a cluster)", []Option{DenyCache(0), autoPipeline(true)}, false},
		{"sliding log, autopipeline and deny cache (falls back)", []Option{autoPipeline(true)}, false},
		{"sliding counter", []Option{Algorithm(SlidingCounter), DenyCache(0)}, false},
		{"fixed window", []Option{Algorithm(FixedWindow), Window(fixed), DenyCache(0)}, false},
		// 500 tokens a day: one refills every 173 s, far longer than the test.
		{"token bucket", []Option{Algorithm(TokenBucket), Burst(500), Window(24 * time.Hour), DenyCache(0)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pre := prefix(t)
			policies := make([]*Policy, len(clients))
			var pipelined int64
			for i, c := range clients {
				opts := append([]Option{Redis(c), Key(pre), Window(time.Hour), Limit(500)}, tc.opts...)
				policies[i] = mustPolicy(t, opts...)
				if (policies[i].route.Engine.Pipeliner() != nil) != tc.pipe {
					t.Fatalf("auto-pipeliner %v, want %v", policies[i].route.Engine.Pipeliner() != nil, tc.pipe)
				}
				pipelined -= hooks[i].n.Load()
			}
			var allowed, rejected atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					p := policies[g%len(policies)]
					for range 16 { // 1,024 attempts in all
						d, err := p.Allow(ctx, "hot", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						} else {
							rejected.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			for _, h := range hooks {
				pipelined += h.n.Load()
			}
			t.Logf("%d of 1024 decisions pipelined", pipelined)
			if allowed.Load() != 500 || rejected.Load() != 1024-500 {
				t.Fatalf("admitted %d and rejected %d, want exactly 500 and 524", allowed.Load(), rejected.Load())
			}
			if tc.pipe && pipelined == 0 {
				t.Fatal("autoPipeline(true) on a ClusterClient: no decision went through a pipeline")
			}
			key := ruleKey(policies[0], 0, "hot")
			if n := storedUnits(t, clients[0], AlgorithmKind(policies[0].route.Rules[0].Alg.Name()), key); n != 500 {
				t.Fatalf("the key %s holds %d units, want 500", key, n)
			}
			// A fresh policy, without a deny cache, asks Redis: nothing left.
			p := mustPolicy(t, slices.Concat([]Option{Redis(clients[1]), Key(pre), Window(time.Hour), Limit(500)}, tc.opts, []Option{DenyCache(0)})...)
			if d, err := p.Allow(ctx, "hot", 1); err != nil || d.Allowed || d.Remaining != 0 || d.Cached {
				t.Fatalf("after the race: %+v, %v; want a rejection by Redis with 0 remaining", d, err)
			}
		})
	}
}

// windowFarFromBoundary returns a window from base up (in whole minutes)
// whose next aligned boundary on the Redis clock is more than five minutes
// away, so that a fixed window cannot roll over during the test.
func windowFarFromBoundary(t *testing.T, c redis.Cmdable, base time.Duration) time.Duration {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	us := now.UnixMicro()
	for w := base; ; w += time.Minute {
		if left := w.Microseconds() - us%w.Microseconds(); left > (5 * time.Minute).Microseconds() {
			return w
		}
	}
}

// storedUnits reads back how many units the algorithm's key holds.
func storedUnits(t *testing.T, c *redis.ClusterClient, alg AlgorithmKind, key string) int64 {
	t.Helper()
	ctx := context.Background()
	switch alg {
	case SlidingLog:
		n, err := logUnits(ctx, c, key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	case SlidingCounter:
		// lua/sliding_counter.lua: the total of the counted sub-windows is
		// the big-endian uint32 at bytes 9 to 12.
		s, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(s) < 13 {
			t.Fatalf("counter state of %d bytes: %q", len(s), s)
		}
		return int64(binary.BigEndian.Uint32([]byte(s[9:13])))
	case FixedWindow:
		return fixedWindowCount(t, c, key)
	}
	// A token bucket keeps a time, not a count; the decision after the race
	// checks it.
	return 500
}

// TestClusterRules: a policy with two rules of different algorithms is
// decided by one script on the cluster, for identities on every master:
// all or nothing, exact under concurrency, and never a CROSSSLOT error.
func TestClusterRules(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx := context.Background()

	t.Run("all or nothing", func(t *testing.T) {
		c := cl.Client()
		pre := prefix(t)
		hour := windowFarFromBoundary(t, c, time.Hour)
		// No deny cache: this checks what the script reports for every
		// rule (TestDenyCacheMatchesRedisForEveryAlgorithm covers the cache).
		p := mustPolicy(t, Redis(c), Key(pre), DenyCache(0),
			Rule(Name("a"), Window(10*time.Second), Limit(2)),
			Rule(Name("b"), Window(hour), Limit(3), Algorithm(FixedWindow)))
		// The test clock only moves forward from the wall clock: keys
		// expire on the server's own clock. It starts on a millisecond, the
		// sliding log's unit, so that rule a's entries leave exactly 10 s
		// after their admission.
		now := (time.Now().UnixMicro()/1000 + 1) * 1000
		p.route.Clock = func() int64 { return now }
		// One identity per master, so the script runs on each of them.
		ids := identityPerMaster(cl)
		for _, id := range ids {
			start := now
			for i, step := range []struct {
				after   time.Duration
				allowed bool
				rule    string
				aLeft   int
				bLeft   int
			}{
				{0, true, "a", 1, 2},
				{0, true, "a", 0, 1},
				{0, false, "a", 0, 1}, // a fires; b keeps its 1
				{10 * time.Second, true, "b", 1, 0},
				{0, false, "b", 1, 0}, // b fires; a keeps its 1
			} {
				now += step.after.Microseconds()
				d, err := p.Allow(ctx, id, 1)
				if err != nil {
					t.Fatalf("%s step %d: %v", id, i, err)
				}
				if d.Allowed != step.allowed || d.Rule != step.rule || len(d.Rules) != 2 ||
					d.Rules[0].Remaining != step.aLeft || d.Rules[1].Remaining != step.bLeft {
					t.Fatalf("%s step %d: %+v; want allowed=%v rule=%s a=%d b=%d", id, i, d, step.allowed, step.rule, step.aLeft, step.bLeft)
				}
			}
			end := now
			now = start // the next identity starts afresh
			ka, kb := ruleKey(p, 0, id), ruleKey(p, 1, id)
			// The entries in rule a's window at the end: the two admitted at
			// the start have left it, the rejected requests added nothing.
			log, err := readSlidingLog(ctx, c, ka)
			if n := log.inWindow(end, (10 * time.Second).Microseconds()); err != nil || n != 1 {
				t.Fatalf("%s: rule a holds %d, %v; want 1 (nothing from the rejected request)", ka, n, err)
			}
			if v := fixedWindowCount(t, c, kb); v != 3 {
				t.Fatalf("%s: rule b counted %d; want 3", kb, v)
			}
		}
	})

	t.Run("exact under concurrency", func(t *testing.T) {
		clients := []*redis.ClusterClient{cl.Client(), cl.Client(), cl.Client()}
		pre := prefix(t)
		policies := make([]*Policy, len(clients))
		for i, c := range clients {
			policies[i] = mustPolicy(t, Redis(c), Key(pre), DenyCache(0),
				Rule(Name("a"), Window(time.Hour), Limit(300)),
				Rule(Name("b"), Window(24*time.Hour), Limit(400), Algorithm(TokenBucket)))
		}
		allowed := allowConcurrently(t, 64, 10, func(g int) (Decision, error) { // 640 attempts in all
			return policies[g%len(policies)].Allow(ctx, "hot", 1)
		})
		if t.Failed() {
			return
		}
		if allowed != 300 {
			t.Fatalf("admitted %d of 640, want exactly 300 (rule a's limit)", allowed)
		}
		if n, err := logUnits(ctx, clients[0], ruleKey(policies[0], 0, "hot")); err != nil || n != 300 {
			t.Fatalf("rule a holds %d, %v; want 300", n, err)
		}
		// The 340 requests rule a rejected took no token from rule b.
		d, err := policies[0].Allow(ctx, "hot", 1)
		if err != nil || d.Allowed || d.Rule != "a" || d.Rules[0].Remaining != 0 || d.Rules[1].Remaining != 100 {
			t.Fatalf("after the race: %+v, %v; want a rejection by a, with 100 tokens left in b", d, err)
		}
	})

	t.Run("identities on every master", func(t *testing.T) {
		c := cl.Client()
		pre := prefix(t)
		p := mustPolicy(t, Redis(c), Key(pre),
			Rule(Name("per-second"), Window(time.Second), Limit(5)),
			Rule(Name("per-minute"), Window(time.Minute), Limit(20), Algorithm(SlidingCounter), subWindows(6)))
		perMaster := make([]int, 3)
		for i := range 60 {
			id := "user:" + strconv.Itoa(i)
			d, err := p.Allow(ctx, id, 1)
			if err != nil || !d.Allowed || d.Rules[0].Remaining != 4 || d.Rules[1].Remaining != 19 {
				t.Fatalf("%s: %+v, %v", id, d, err)
			}
			m := cl.MasterForKey(pre + "{" + id + "}")
			perMaster[m]++
			for i := range 2 {
				key := ruleKey(p, i, id)
				if cl.MasterForKey(key) != m {
					t.Fatalf("%s is not in the slot of its identity", key)
				}
				if n, err := cl.NodeClient(m).Exists(ctx, key).Result(); err != nil || n != 1 {
					t.Fatalf("%s on master %d: EXISTS = %d, %v", key, m, n, err)
				}
			}
		}
		for m, n := range perMaster {
			if n == 0 {
				t.Fatalf("no identity of 60 on master %d: %v", m, perMaster)
			}
		}
	})
}

// identityPerMaster returns, for each master, an identity whose keys live
// on it. The identity is the keys' hash tag, so the prefix does not matter.
func identityPerMaster(cl *redistest.Cluster) []string {
	ids := make([]string, 3)
	for n, found := 0, 0; found < len(ids); n++ {
		id := "id-" + strconv.Itoa(n)
		if m := cl.MasterForKey("{" + id + "}"); ids[m] == "" {
			ids[m] = id
			found++
		}
	}
	return ids
}

// TestClusterMasterDown: with one master stopped, decisions on its keys
// fail under the failure policy within the timeout, on the single-rule and
// the several-rule path, while the other two masters keep deciding exactly:
// just after the stop, once the cluster has marked the master failed, and
// under concurrent traffic on all three masters.
//
// The breaker is off: it counts the failures of all of a rule's keys
// together, and with it on, the stopped master's failures refuse the
// healthy masters' keys as well (see TestClusterMasterDownKnownBugs).
func TestClusterMasterDown(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	// Short client timeouts so that abandoned calls to the dead master end
	// soon. The decisions' own Timeout is long: the healthy masters answer
	// every call, and on a loaded machine a call to them must not run out
	// of a short Timeout and fail while another master is being stopped.
	// The stopped master refuses connections, which fails its decisions
	// without waiting for the Timeout.
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		MaxRedirects: 1,
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { _ = cc.Close() })
	const (
		timeout = 10 * time.Second
		limit   = 10
		victim  = 1
	)
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	pre := prefix(t)
	type policy struct {
		name string
		p    *Policy
		open bool
	}
	var policies []policy
	for _, pc := range []struct {
		name string
		opts []Option
		open bool
	}{
		{"fail closed", []Option{OnFailure(FailClosed)}, false},
		{"fail open", []Option{OnFailure(FailOpen)}, true},
		{"two rules, fail closed", []Option{OnFailure(FailClosed),
			Rule(Name("a"), Window(time.Hour), Limit(limit)),
			Rule(Name("b"), Window(24*time.Hour), Limit(2*limit), Algorithm(TokenBucket))}, false},
		{"two rules, fail open", []Option{OnFailure(FailOpen),
			Rule(Name("a"), Window(time.Hour), Limit(limit), Algorithm(SlidingCounter)),
			Rule(Name("b"), Window(time.Hour), Limit(2*limit))}, true},
	} {
		opts := append([]Option{Redis(cc), Key(pre + strconv.Itoa(len(policies)) + ":"), Window(time.Hour), Limit(limit),
			Timeout(timeout), withBreaker(0, 0), quiet}, pc.opts...)
		policies = append(policies, policy{pc.name, mustPolicy(t, opts...), pc.open})
	}
	ids := identityPerMaster(cl)
	ctx := context.Background()
	used := map[string]int{} // admitted so far, per policy and identity

	// decide makes one decision and checks it against the master's state.
	decide := func(phase string, pol policy, m int) {
		t.Helper()
		start := time.Now()
		d, err := pol.p.Allow(ctx, ids[m], 1)
		// A hang guard, not a performance goal: the call and the PING
		// that confirms a timeout, and room for a loaded machine.
		if el := time.Since(start); el > 3*timeout {
			t.Fatalf("%s, %s, master %d: took %v with a %v timeout", phase, pol.name, m, el, timeout)
		}
		if m == victim && phase != "before" {
			if err == nil || d.Err == nil || d.Allowed != pol.open {
				t.Fatalf("%s, %s, the stopped master's key: %+v, %v; want allowed=%v with the error", phase, pol.name, d, err, pol.open)
			}
			return
		}
		k := pol.name + "/" + ids[m]
		if err != nil || !d.Allowed || d.Remaining != limit-used[k]-1 {
			t.Fatalf("%s, %s, master %d: %+v, %v; want allowed with %d remaining", phase, pol.name, m, d, err, limit-used[k]-1)
		}
		used[k]++
	}
	for _, pol := range policies {
		for m := range ids {
			decide("before", pol, m)
		}
	}
	cl.StopMaster(victim)
	for _, pol := range policies {
		for m := range ids {
			decide("just stopped", pol, m)
		}
	}
	cl.WaitFailed(victim)
	for _, pol := range policies {
		for m := range ids {
			decide("marked failed", pol, m)
			decide("marked failed, again", pol, m)
		}
	}
	// The live masters' keys are exact to the end: the rest of the limit,
	// then a rejection.
	for _, pol := range policies {
		for m := range ids {
			if m == victim {
				continue
			}
			for used[pol.name+"/"+ids[m]] < limit {
				decide("drain", pol, m)
			}
			d, err := pol.p.Allow(ctx, ids[m], 1)
			if err != nil || d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s, master %d, over the limit: %+v, %v; want a rejection", pol.name, m, d, err)
			}
		}
	}

	t.Run("concurrent", func(t *testing.T) {
		// 32 callers over 15 identities, 5 per master: the stopped
		// master's decisions do not disturb the others, which admit
		// exactly their limit.
		const limit = 20
		pre := prefix(t)
		p := mustPolicy(t, Redis(cc), Key(pre), Window(time.Hour), Limit(limit), Timeout(timeout), withBreaker(0, 0), quiet, OnFailure(FailClosed))
		var ids []string
		for n := 0; len(ids) < 15; n++ {
			id := "c" + strconv.Itoa(n)
			if m := cl.MasterForKey("{" + id + "}"); idsOnMaster(cl, ids, m) < 5 {
				ids = append(ids, id)
			}
		}
		var mu sync.Mutex
		admitted := map[string]int{}
		var liveFailed, deadFailed, live atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for round := range 20 { // 640 attempts, about 43 per identity
					id := ids[(g+round*7)%len(ids)]
					d, err := p.Allow(ctx, id, 1)
					if cl.MasterForKey("{"+id+"}") == victim {
						if err == nil || d.Allowed {
							t.Errorf("%s on the stopped master: %+v, %v", id, d, err)
						}
						deadFailed.Add(1)
						continue
					}
					live.Add(1)
					if err != nil {
						liveFailed.Add(1)
						t.Logf("%s: %v", id, err)
						continue
					}
					if d.Allowed {
						mu.Lock()
						admitted[id]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d decisions on the live masters (%d failed), %d on the stopped one", live.Load(), liveFailed.Load(), deadFailed.Load())
		// No live call can outlast the long Timeout, so none fails.
		if liveFailed.Load() != 0 {
			t.Fatalf("%d of %d decisions on the live masters failed", liveFailed.Load(), live.Load())
		}
		for _, id := range ids {
			m := cl.MasterForKey("{" + id + "}")
			if m == victim {
				continue
			}
			n, err := logUnits(ctx, cl.NodeClient(m), ruleKey(p, 0, id))
			if err != nil || n != limit || admitted[id] != limit {
				t.Fatalf("%s on master %d: admitted %d, the key holds %d (%v); want exactly %d", id, m, admitted[id], n, err, limit)
			}
		}
	})
}

// idsOnMaster returns how many of ids live on master m.
func idsOnMaster(cl *redistest.Cluster, ids []string, m int) int {
	n := 0
	for _, id := range ids {
		if cl.MasterForKey("{"+id+"}") == m {
			n++
		}
	}
	return n
}

// TestClusterMasterDownHealthyMastersServe guards two fixed bugs: with one
// master of three stopped, decisions on the two healthy masters must keep
// working under concurrent traffic
//
//   - with the default circuit breaker, which used to count the failures of
//     all of a rule's keys together and so opened on the stopped master's
//     failures, refusing every key (now there is one breaker per master);
//   - with autoPipeline(true) on a ClusterClient, whose go-redis
//     auto-pipeliner batches by slot range, not by node, so a batch stuck
//     on the stopped master stalled healthy masters' decisions (now a
//     ClusterClient is never auto-pipelined).
func TestClusterMasterDownHealthyMastersServe(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	const victim = 1
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	cases := []struct {
		name string
		opts []Option
		p    *Policy
	}{
		{"default breaker", nil, nil},
		{"autopipeline", []Option{autoPipeline(true), withBreaker(0, 0)}, nil},
	}
	for i := range cases {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRedirects: 1, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { _ = cc.Close() })
		cases[i].p = mustPolicy(t, append([]Option{Redis(cc), Key(prefix(t)), Window(time.Hour), Limit(lua.MaxLogLimit), DenyCache(0),
			Timeout(time.Second), OnFailure(FailClosed), quiet}, cases[i].opts...)...)
		// Connect to every master. A first call on a loaded machine can
		// outlast the policy's Timeout while it dials: that is the
		// machine's speed, not what this test checks, so it is retried.
		for _, id := range identityPerMaster(cl) {
			var err error
			for try := 0; try < 10; try++ {
				if _, err = cases[i].p.Allow(ctx, id, 1); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.StopMaster(victim)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var live, liveFailed, circuitOpen atomic.Int64
			var wg sync.WaitGroup
			stop := time.Now().Add(1500 * time.Millisecond)
			for g := range 32 {
				wg.Go(func() {
					for n := 0; time.Now().Before(stop); n++ {
						id := "u" + strconv.Itoa(g) + ":" + strconv.Itoa(n)
						_, err := tc.p.Allow(ctx, id, 1)
						if cl.MasterForKey("{"+id+"}") == victim {
							continue
						}
						live.Add(1)
						if err != nil {
							liveFailed.Add(1)
							if errors.Is(err, ErrCircuitOpen) {
								circuitOpen.Add(1)
							}
						}
					}
				})
			}
			wg.Wait()
			t.Logf("healthy masters: %d of %d decisions failed (%d with the breaker open)", liveFailed.Load(), live.Load(), circuitOpen.Load())
			if liveFailed.Load()*100 > live.Load() {
				t.Fatalf("%d of %d decisions on the healthy masters failed; want at most 1%%", liveFailed.Load(), live.Load())
			}
		})
	}
}

// TestClusterHonoursTheZSETLog: on a Redis Cluster, a sliding-log key that
// the version before kept (its script, lua/testdata, run on the cluster for
// the key without the sl2: tag) is honoured by this version's first
// decision and while the older instance goes on: the older key has the same
// hash tag, so the script reads it in the slot of its own key.
func TestClusterHonoursTheZSETLog(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := cl.Client()
	ctx := context.Background()
	src, err := os.ReadFile("../lua/testdata/single_sliding_log_zset.lua")
	if err != nil {
		t.Fatal(err)
	}
	const limit = 10
	older := redis.NewScript(strings.NewReplacer("@WINDOW@", strconv.FormatInt(time.Minute.Microseconds(), 10),
		"@LIMIT@", strconv.Itoa(limit), "@PARAM@", "64", "@SETTINGS_BAD@", "false").Replace(string(src)))
	pre := prefix(t)
	p := mustPolicy(t, Redis(c), Key(pre), Window(time.Minute), Limit(limit), DenyCache(0))
	admitOld := func(cost int) {
		t.Helper()
		// The Redis clock (""), as that version sent.
		if err := older.Run(ctx, c, []string{pre + "{k}"}, "", cost).Err(); err != nil {
			t.Fatal(err)
		}
	}
	admitOld(3)
	d, err := p.Allow(ctx, "k", 1)
	if err != nil || !d.Allowed || d.Remaining != limit-4 {
		t.Fatalf("the first decision after the older instance admitted 3: %+v, %v; want allowed with %d remaining", d, err, limit-4)
	}
	admitOld(2)
	if d, err = p.Allow(ctx, "k", limit-7); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after the older instance admitted 2 more: %+v, %v; want allowed with 1 remaining", d, err)
	}
	if d, err = p.Allow(ctx, "k", 2); err != nil || d.Allowed {
		t.Fatalf("over the limit counted across both versions: %+v, %v; want refused", d, err)
	}
}
