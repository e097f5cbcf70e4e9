package ginlimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// banRoute is a merchant-like route: 5 per second per IP, and an IP that
// collects 20 refusals within 10 s is banned for 60 s.
func banRoute(pre string, extra ...Option) []Option {
	return append([]Option{Key(pre), Type(IP), Window(time.Second), Limit(5),
		Ban(20, 10*time.Second, time.Minute)}, extra...)
}

// TestBanAfterRefusals: on a real redis-server, with the deny cache off
// (every refusal reaches Redis): 5 admitted, 20 refused by the rate, and
// the 20th refusal starts the ban; then every request is refused with the
// ban's message and a Retry-After of about a minute, Peek shows the ban,
// observers see OutcomeBanned, and Reset lifts it.
func TestBanAfterRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), banRoute(prefix(t), DenyCache(0))...)
	hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
	var codes []int
	for range 30 {
		w := do(in.e, http.MethodGet, "/claim", hdr)
		codes = append(codes, w.Code)
		d := in.seen.last().Decision
		n := len(codes)
		switch {
		case n <= 5:
			if w.Code != 200 {
				t.Fatalf("request %d: %d, want 200", n, w.Code)
			}
		case n < 25:
			if w.Code != 429 || d.Banned || strings.Contains(w.Body.String(), "banned") {
				t.Fatalf("request %d: %d banned %v %s, want the rate's 429", n, w.Code, d.Banned, w.Body)
			}
		default: // the 20th refusal (request 25) makes the ban
			retry, _ := strconv.Atoi(w.Header().Get("Retry-After"))
			if w.Code != 429 || !d.Banned || !strings.Contains(w.Body.String(), DefaultBanMessage) || retry < 50 || retry > 60 {
				t.Fatalf("request %d: %d banned %v Retry-After %q %s, want the ban's 429 with about a minute", n, w.Code, d.Banned, w.Header().Get("Retry-After"), w.Body)
			}
			if in.seen.last().Outcome != OutcomeBanned {
				t.Fatalf("request %d: outcome %q, want banned", n, in.seen.last().Outcome)
			}
		}
	}
	target := Target{Route: claimRoute, IP: netip.MustParseAddr("192.0.2.7")}
	d, err := in.policy.Peek(context.Background(), target)
	if err != nil || !d.Banned || d.Allowed || d.RetryAfter < 50*time.Second {
		t.Fatalf("Peek: %+v %v, want the ban", d, err)
	}
	// Another IP is not banned.
	if w := do(in.e, http.MethodGet, "/claim", map[string]string{"RemoteAddr": "192.0.2.8:1"}); w.Code != 200 {
		t.Fatalf("another IP: %d", w.Code)
	}
	if err := in.policy.Reset(context.Background(), target, "test"); err != nil {
		t.Fatal(err)
	}
	if w := do(in.e, http.MethodGet, "/claim", hdr); w.Code != 200 {
		t.Fatalf("after Reset: %d %s, want 200", w.Code, w.Body)
	}
}

// TestBanCountsCachedRefusals: with the deny cache on, refusals answered in
// process count as strikes too: the next Redis call on the key (once the
// cached refusal has lapsed, at MaxStaleness) reports them, and the ban
// follows.
func TestBanCountsCachedRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const bound = 200 * time.Millisecond
	in := newInstance(t, srv.Client(), banRoute(prefix(t), maxStaleness(bound), Window(time.Hour))...)
	hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
	cached, seen := 0, 0 // refusals from the deny cache, and from Redis
	count := func() {
		if d := in.seen.last().Decision; d.Cached {
			cached++
		} else if !d.Allowed {
			seen++
		}
	}
	for range 30 {
		do(in.e, http.MethodGet, "/claim", hdr)
		count()
	}
	if cached == 0 {
		t.Fatal("no refusal came from the deny cache: the test proves nothing")
	}
	// Poll (a loaded machine may take its time): the ban must come, from
	// strikes most of which Redis never saw as requests.
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(bound)
		w := do(in.e, http.MethodGet, "/claim", hdr)
		if in.seen.last().Decision.Banned {
			if !strings.Contains(w.Body.String(), "temporarily banned") {
				t.Fatalf("banned, but the body is %s", w.Body)
			}
			if seen > 5 {
				t.Fatalf("Redis saw %d refusals before the ban: the cached ones did not count", seen)
			}
			break
		}
		count()
		if time.Now().After(deadline) {
			t.Fatalf("no ban 30 s after 25 refusals (%d from the cache)", cached)
		}
	}
}

// TestBanIsSharedAndExact: two instances on one real Redis, 16 goroutines
// flooding one IP: exactly the limit is admitted, the ban comes, and once
// it has, both instances refuse with it.
func TestBanIsSharedAndExact(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := banRoute(prefix(t), Window(time.Hour), DenyCache(0))
	a, b := newInstance(t, srv.Client(), opts...), newInstance(t, srv.Client(), opts...)
	hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
	var admitted, banned atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		in := a
		if g%2 == 1 {
			in = b
		}
		wg.Go(func() {
			for range 10 {
				w := do(in.e, http.MethodGet, "/claim", hdr)
				switch {
				case w.Code == 200:
					admitted.Add(1)
				case strings.Contains(w.Body.String(), "banned"):
					banned.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 5 || banned.Load() == 0 {
		t.Fatalf("%d admitted, %d banned: want exactly 5 admitted and a ban", admitted.Load(), banned.Load())
	}
	for name, in := range map[string]*instance{"A": a, "B": b} {
		if w := do(in.e, http.MethodGet, "/claim", hdr); !strings.Contains(w.Body.String(), "banned") {
			t.Fatalf("%s after the ban: %d %s", name, w.Code, w.Body)
		}
	}
}

// TestBanOnACluster: the ban's key lives in its rule's slot; two instances
// on a real 3-master cluster share strikes and ban.
func TestBanOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	opts := banRoute(prefix(t), Window(time.Hour), DenyCache(0))
	a, b := newInstance(t, cl.Client(), opts...), newInstance(t, cl.Client(), opts...)
	for i, ip := range []string{"192.0.2.1", "192.0.2.2", "198.51.100.3"} {
		hdr := map[string]string{"RemoteAddr": ip + ":1"}
		for n := range 25 { // 5 admitted, 20 refusals, alternating instances
			in := a
			if n%2 == 1 {
				in = b
			}
			do(in.e, http.MethodGet, "/claim", hdr)
		}
		for name, in := range map[string]*instance{"A": a, "B": b} {
			w := do(in.e, http.MethodGet, "/claim", hdr)
			if !in.seen.last().Decision.Banned {
				t.Fatalf("IP %d on %s: %d %s, want the ban", i, name, w.Code, w.Body)
			}
		}
	}
}

// TestBanOptions: Ban's arguments are checked at start-up, naming the
// option.
func TestBanOptions(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for name, opt := range map[string]Option{
		"no strikes":  Ban(0, time.Second, time.Minute),
		"too many":    Ban(2e6, time.Second, time.Minute),
		"tiny period": Ban(1, time.Microsecond, time.Minute),
		"tiny ban":    Ban(1, time.Second, time.Microsecond),
	} {
		if _, err := New(Redis(c), opt); err == nil || !strings.Contains(err.Error(), "Ban") {
			t.Errorf("%s: %v, want an error naming the option", name, err)
		}
	}
}

// TestBanOnARouteWithRules: a ban on one rule of a route with Rules counts
// refusals by any rule, and its 429 names the rule.
func TestBanOnARouteWithRules(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	in := newInstance(t, c, Key(prefix(t)), DenyCache(0),
		Rule(Name("per-ip"), Type(IP), Window(time.Hour), Limit(100), Ban(3, time.Hour, time.Hour)),
		Rule(Name("route"), Window(time.Hour), Limit(2)))
	hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
	var last *httptest.ResponseRecorder
	for range 6 {
		last = do(in.e, http.MethodGet, "/claim", hdr)
	}
	d := in.seen.last().Decision
	if !d.Banned || d.Rule != "per-ip" || !strings.Contains(last.Body.String(), `"rule":"per-ip"`) {
		t.Fatalf("after 2 admitted and 3 refusals by the route rule: %+v %s, want per-ip's ban", d, last.Body)
	}
}

// TestLongBanRefusedAtStartUpOrWorks: the penalty passes the ban's
// length to the several-rule script as its param in milliseconds, which
// rule.lua's bad() caps at 1e9 (about 11.6 days). A Ban of 30 days
// accepted at start-up would make every decision of the rule an error
// reply from Redis, so that under FailOpen the rule would limit nothing.
// A configuration the scripts would refuse is refused at start-up: Ban
// takes at most MaxBan, and a longer one must either be refused or work.
func TestLongBanRefusedAtStartUpOrWorks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l, err := New(Redis(c), Timeout(5*time.Second), OnFailure(FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Window(time.Hour), Limit(2), Ban(3, time.Hour, 30*24*time.Hour))
	if err != nil {
		return // refused at start-up: the promise holds
	}
	admitted := 0
	var firstErr error
	for range 10 {
		d, err := p.Allow(context.Background(), "client", 1)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted > 2 || firstErr != nil {
		t.Fatalf("Ban(3, 1h, 720h) accepted at start-up, then %d of 10 admitted at Limit(2); first error: %v", admitted, firstErr)
	}
}

// TestBanUpTo1e9MillisecondsHolds is the control of
// TestLongBanRefusedAtStartUpOrWorks: a ban of 11 days (under 1e9
// ms) decides in Redis without error, and the limit holds under FailOpen.
func TestBanUpTo1e9MillisecondsHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(Redis(srv.Client()), Timeout(5*time.Second), OnFailure(FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Window(time.Hour), Limit(2), Ban(3, time.Hour, 11*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 10 {
		d, err := p.Allow(context.Background(), "client", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("%d admitted at Limit(2)", admitted)
	}
}

// TestBanCountsCachedRefusalsOfAnotherRule: Ban says a refusal by any
// rule of the route is a strike, and that refusals answered from the deny
// cache count as surely as Redis's. On a route with Rules, when the rule
// that refuses is not the one with the Ban, its cached refusals must still
// be reported to the ban: otherwise a flood refused in process collects one
// strike per MaxStaleness, and Ban(5, ...) does not ban a client that was
// refused 40 times (it is banned at once with DenyCache(0), see
// TestBanOnARouteWithRules).
func TestBanCountsCachedRefusalsOfAnotherRule(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	const bound = 300 * time.Millisecond
	in := newInstance(t, c, Key(prefix(t)), maxStaleness(bound),
		Rule(Name("per-ip"), Type(IP), Window(time.Hour), Limit(100), Ban(5, time.Hour, time.Hour)),
		Rule(Name("route"), Window(time.Hour), Limit(2)))
	hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
	cached, redisRefused := 0, 0
	for range 42 { // 2 admitted, 40 refused by "route"
		do(in.e, http.MethodGet, "/claim", hdr)
		if d := in.seen.last().Decision; d.Cached {
			cached++
		} else if !d.Allowed {
			redisRefused++
		}
	}
	if cached == 0 {
		t.Fatal("no refusal came from the deny cache: the test proves nothing")
	}
	// The next Redis call on the key reports the cached refusals.
	time.Sleep(2 * bound)
	do(in.e, http.MethodGet, "/claim", hdr)
	time.Sleep(2 * bound)
	do(in.e, http.MethodGet, "/claim", hdr)
	if d := in.seen.last().Decision; !d.Banned {
		t.Fatalf("after 42 refusals (%d from the deny cache, %d from Redis) and two Redis calls: %+v, want per-ip's ban", cached, redisRefused, d)
	}
}
