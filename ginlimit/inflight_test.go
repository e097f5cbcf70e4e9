package ginlimit

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// slotWait bounds how long a test waits for something that happens at
// once on an idle machine: a guard against hanging, never a timing claim.
const slotWait = 60 * time.Second

// gate is a handler that reports each request it serves on entered and
// then holds it until release is closed, so a test knows which requests
// hold a slot without assuming how long anything takes. A request with
// ?fast=1 returns at once; one with ?panic=1 panics.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) handle(c *gin.Context) {
	switch {
	case c.Query("panic") != "":
		panic("the handler failed")
	case c.Query("fast") == "":
		g.entered <- struct{}{}
		<-g.release
	}
	c.String(http.StatusOK, "ok")
}

// slotEngine returns an engine serving GET /order with the limit, behind
// gin's recovery (quiet), and g's handler.
func slotEngine(limit gin.HandlerFunc, g *gate) *gin.Engine {
	e := gin.New()
	e.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
	e.GET("/order", limit, g.handle)
	return e
}

// slotLimiter returns a limiter of c with a generous Timeout, closed when
// the test ends.
func slotLimiter(t *testing.T, c redis.Scripter, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(append([]Option{Redis(c), Timeout(testTimeout), queueTimeout(testTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// held reads how many slots of p's rule are held, through Peek.
func held(t *testing.T, p *Policy, rule string) int {
	t.Helper()
	d, err := p.Peek(context.Background(), Target{Route: "GET /order", Rule: rule})
	if err != nil {
		t.Fatal(err)
	}
	return d.Limit - d.Remaining
}

// exactSlots sends total simultaneous requests spread over engines, whose
// routes allow n in flight and whose handler is g's, and checks that
// exactly n get in while they are all held, the others get 429, and, once
// released, the n answer 200 and every slot is free again (peek).
func exactSlots(t *testing.T, engines []*gin.Engine, g *gate, n, total int, peek *Policy, rule string) {
	t.Helper()
	codes := make(chan int, total)
	start := make(chan struct{})
	for i := range total {
		go func() {
			<-start
			codes <- do(engines[i%len(engines)], http.MethodGet, "/order", nil).Code
		}()
	}
	close(start)
	in, refused := 0, 0
	deadline := time.After(slotWait)
	for in+refused < total {
		select {
		case <-g.entered:
			in++
		case code := <-codes:
			if code != http.StatusTooManyRequests {
				t.Fatalf("a refused request got %d, want 429", code)
			}
			refused++
		case <-deadline:
			t.Fatalf("after %v: %d in, %d refused of %d", slotWait, in, refused, total)
		}
	}
	if in != n || refused != total-n {
		t.Fatalf("%d requests got a slot and %d were refused, want exactly %d and %d", in, refused, n, total-n)
	}
	if got := held(t, peek, rule); got != n {
		t.Errorf("Peek: %d slots held while %d requests run, want %d", got, n, n)
	}
	g.open()
	for range n {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("a request that held a slot got %d, want 200", code)
		}
	}
	if got := held(t, peek, rule); got != 0 {
		t.Errorf("Peek: %d slots held after every request returned, want 0", got)
	}
}

// TestInFlightExactAcrossInstances: two instances (limiters with clients of
// their own) on one redis-server, 10 in flight, 50 simultaneous requests:
// exactly 10 get in while they are all held, 40 get 429, and every slot is
// released when the handlers return.
func TestInFlightExactAcrossInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pfx := prefix(t)
	g := newGate()
	defer g.open()
	var engines []*gin.Engine
	for range 2 {
		l := slotLimiter(t, srv.Client())
		engines = append(engines, slotEngine(l.RateLimit(Key(pfx), InFlight(10, 30*time.Second)), g))
	}
	peek, err := slotLimiter(t, srv.Client()).Policy(Key(pfx), InFlight(10, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	exactSlots(t, engines, g, 10, 50, peek, "")
	if n := srv.Client().Exists(context.Background(), pfx+rule.SlotTag+"{GET /order}").Val(); n != 0 {
		t.Errorf("the slot key is still there once every slot is released")
	}
}

// TestInFlightCluster is TestInFlightExactAcrossInstances on a Redis
// Cluster, with a rate rule and two in-flight rules on the route (their
// keys share the route's slot): exactly 10 in flight over two instances.
func TestInFlightCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	pfx := prefix(t)
	opts := []Option{Key(pfx),
		Rule(Name("rate"), Window(time.Minute), Limit(1000)),
		Rule(Name("orders"), InFlight(10, 30*time.Second)),
		Rule(Name("wide"), InFlight(20, 30*time.Second))}
	g := newGate()
	defer g.open()
	var engines []*gin.Engine
	for range 2 {
		c := cl.Client()
		t.Cleanup(func() { _ = c.Close() })
		engines = append(engines, slotEngine(slotLimiter(t, c).RateLimit(opts...), g))
	}
	c := cl.Client()
	t.Cleanup(func() { _ = c.Close() })
	peek, err := slotLimiter(t, c).Policy(opts...)
	if err != nil {
		t.Fatal(err)
	}
	exactSlots(t, engines, g, 10, 50, peek, "orders")
	if got := held(t, peek, "wide"); got != 0 {
		t.Errorf("rule wide: %d slots held after every request returned", got)
	}
}

// TestInFlightReleaseOnPanic: a handler that panics gives its slot back,
// and the panic still reaches gin's recovery (500) or, without one, the
// caller.
func TestInFlightReleaseOnPanic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := slotLimiter(t, srv.Client())
	p, err := l.Policy(Key(prefix(t)), InFlight(1, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	e := slotEngine(p.route.Serve, g)
	for range 3 {
		if w := do(e, http.MethodGet, "/order?panic=1", nil); w.Code != http.StatusInternalServerError {
			t.Fatalf("a panicking handler: %d, want gin's recovery's 500", w.Code)
		}
		if n := held(t, p, ""); n != 0 {
			t.Fatalf("%d slots held after a panic, want 0", n)
		}
	}
	bare := gin.New()
	bare.GET("/order", p.route.Serve, g.handle)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("without a recovery the panic did not reach the caller")
			}
		}()
		do(bare, http.MethodGet, "/order?panic=1", nil)
	}()
	if n := held(t, p, ""); n != 0 {
		t.Fatalf("%d slots held after a panic without recovery, want 0", n)
	}
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
		t.Fatalf("after the panics: %d, want 200", w.Code)
	}
}

// die takes a slot of p's rule for GET /order as a request would and then
// dies: no renewal, no release.
func die(t *testing.T, p *Policy) {
	t.Helper()
	d, err := decide.ProbeDie(context.Background(), p.route, rule.Scope{Method: http.MethodGet, Route: "/order"})
	if err != nil || !d.Allowed {
		t.Fatalf("the dying instance got no slot: %+v, %v", d, err)
	}
}

// TestInFlightLeaseFreesDeadHolder: the slot of an instance that died
// holding it is refused to others until its lease ends and given at that
// moment (on the test clock, so exactly), and on the real clock frees
// itself (polled, with a generous deadline).
func TestInFlightLeaseFreesDeadHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	t.Run("test clock", func(t *testing.T) {
		pfx := prefix(t)
		var now int64 = modelEpoch()
		clock := func() int64 { return now }
		dead, err := slotLimiter(t, srv.Client()).Policy(Key(pfx), InFlight(1, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		dead.route.Clock = clock
		die(t, dead)
		other, err := slotLimiter(t, srv.Client()).Policy(Key(pfx), InFlight(1, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		other.route.Clock = clock
		e := slotEngine(other.route.Serve, newGate())
		now += time.Hour.Microseconds() - 1
		if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusTooManyRequests {
			t.Fatalf("1 µs before the dead holder's lease ends: %d, want 429", w.Code)
		}
		now++
		if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
			t.Fatalf("when the dead holder's lease ends: %d, want 200", w.Code)
		}
	})
	t.Run("real clock", func(t *testing.T) {
		pfx := prefix(t)
		dead, err := slotLimiter(t, srv.Client()).Policy(Key(pfx), InFlight(1, 300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		die(t, dead)
		e := slotEngine(slotLimiter(t, srv.Client()).RateLimit(Key(pfx), InFlight(1, 300*time.Millisecond)), newGate())
		for deadline := time.Now().Add(slotWait); ; time.Sleep(20 * time.Millisecond) {
			w := do(e, http.MethodGet, "/order?fast=1", nil)
			if w.Code == http.StatusOK {
				break
			}
			if w.Code != http.StatusTooManyRequests || time.Now().After(deadline) {
				t.Fatalf("waiting for the dead holder's lease to end: %d", w.Code)
			}
		}
	})
}

// TestInFlightRenewalKeepsSlot: a handler that runs for several leases
// keeps its slot (renewed every lease/3): another request is refused, and
// the lease's end has moved on.
func TestInFlightRenewalKeepsSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pfx := prefix(t)
	const lease = 1500 * time.Millisecond
	g := newGate()
	defer g.open()
	e := slotEngine(slotLimiter(t, srv.Client()).RateLimit(Key(pfx), InFlight(1, lease)), g)
	done := make(chan int, 1)
	go func() { done <- do(e, http.MethodGet, "/order", nil).Code }()
	<-g.entered
	ctx := context.Background()
	key := pfx + rule.SlotTag + "{GET /order}"
	first := srv.Client().ZRangeWithScores(ctx, key, 0, -1).Val()
	if len(first) != 1 {
		t.Fatalf("the slot key holds %v, want one lease", first)
	}
	time.Sleep(3 * lease)
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusTooManyRequests {
		t.Errorf("after 3 leases of the handler: another request got %d, want 429 (the slot is still held)", w.Code)
	}
	later := srv.Client().ZRangeWithScores(ctx, key, 0, -1).Val()
	if len(later) != 1 || later[0].Member != first[0].Member || later[0].Score < first[0].Score+float64(2*lease.Microseconds()) {
		t.Errorf("the lease went from %v to %v: want the same holder, renewed by at least 2 leases", first, later)
	}
	g.open()
	if code := <-done; code != http.StatusOK {
		t.Errorf("the long handler got %d, want 200", code)
	}
}

// TestInFlightWithRateRule: a rate rule and an in-flight rule on one route.
// The rate rule is decided first: a request refused for want of a slot has
// been counted by the rate rule, and a request the rate rule refuses takes
// no slot. The headers name both rules.
func TestInFlightWithRateRule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p, err := slotLimiter(t, srv.Client()).Policy(Key(prefix(t)),
		Rule(Name("rate"), Window(time.Hour), Limit(3)),
		Rule(Name("orders"), InFlight(1, 30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	defer g.open()
	e := slotEngine(p.route.Serve, g)
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- do(e, http.MethodGet, "/order", nil) }()
	<-g.entered

	w := do(e, http.MethodGet, "/order?fast=1", nil)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"rule":"orders"`) ||
		w.Header().Get("Retry-After") != "1" || !strings.HasPrefix(w.Header().Get("RateLimit"), `"orders";r=0`) {
		t.Fatalf("no slot free: %d %s %v, want 429 from rule orders with Retry-After 1", w.Code, w.Body, w.Header())
	}
	if got := held(t, p, "rate"); got != 2 {
		t.Errorf("rate rule: %d counted, want 2 (the request refused for want of a slot counts)", got)
	}
	g.open()
	w = <-first
	if w.Code != http.StatusOK || w.Header().Get("RateLimit-Policy") != `"rate";q=3;w=3600, "orders";q=1;qu="concurrent-requests"` ||
		!strings.HasPrefix(w.Header().Get("RateLimit"), `"rate";r=`) {
		t.Fatalf("the holder: %d %v", w.Code, w.Header())
	}
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
		t.Fatalf("the slot is free and the rate has 1 left: %d, want 200", w.Code)
	}
	w = do(e, http.MethodGet, "/order?fast=1", nil)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"rule":"rate"`) {
		t.Fatalf("the rate is used up: %d %s, want 429 from rule rate", w.Code, w.Body)
	}
	if got := held(t, p, "orders"); got != 0 {
		t.Errorf("%d slots held after the rate refused, want 0", got)
	}
}

// TestInFlightRefusalIsNotCached: a refusal by an in-flight rule is never
// kept by the deny cache: the moment a slot is released the next request
// gets it.
func TestInFlightRefusalIsNotCached(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	p := mustPolicy(t, Redis(c), Key(prefix(t)), InFlight(1, time.Minute))
	g := newGate()
	defer g.open()
	e := slotEngine(p.route.Serve, g)
	done := make(chan int, 1)
	go func() { done <- do(e, http.MethodGet, "/order", nil).Code }()
	<-g.entered
	for range 5 {
		if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusTooManyRequests {
			t.Fatalf("slot held: %d, want 429", w.Code)
		}
	}
	g.open()
	<-done
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
		t.Fatalf("right after the release: %d, want 200", w.Code)
	}
}

// TestInFlightFailurePolicy: with Redis down, FailLocal allows
// n/LocalInstances in flight in process, FailOpen lets every request
// through, FailClosed answers 503; a saturated process (ErrSaturated,
// here every connection slot taken and a short QueueTimeout) admits
// nothing under any policy (503: only Redis grants while Redis is
// healthy); and a request whose context has ended gets no admission at all
// (ErrClientGone: 499).
func TestInFlightFailurePolicy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	down := redistest.Start(t)
	down.Stop()
	cases := []struct {
		name  string
		fp    FailPolicy
		redis *redistest.Server
		how   string // "saturated": every slot of the node is taken; "ended": the request's context has ended
		in    int    // requests that get in, of 5
		code  int    // the answer of the others
	}{
		{"FailLocal", FailLocal, down, "", 2, http.StatusTooManyRequests},
		{"FailOpen", FailOpen, down, "", 5, 0},
		{"FailClosed", FailClosed, down, "", 0, http.StatusServiceUnavailable},
		{"FailLocal saturated", FailLocal, srv, "saturated", 0, http.StatusServiceUnavailable},
		{"FailOpen saturated", FailOpen, srv, "saturated", 0, http.StatusServiceUnavailable},
		{"FailClosed saturated", FailClosed, srv, "saturated", 0, http.StatusServiceUnavailable},
		{"FailOpen client gone", FailOpen, srv, "ended", 0, 499},
		{"FailLocal client gone", FailLocal, srv, "ended", 0, 499},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var local []bool
			c := tc.redis.Client()
			l := slotLimiter(t, c, OnFailure(tc.fp), LocalInstances(2), queueTimeout(50*time.Millisecond),
				withLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			// The fallback decides on an instance that has heard from
			// Redis: as if this one had, before Redis went down.
			heardOnce(l.instancesFor(&routeConfig{client: c}))
			g := newGate()
			defer g.open()
			e := gin.New()
			e.GET("/order", l.RateLimit(Key(prefix(t)), InFlight(4, 30*time.Second)), func(c *gin.Context) {
				d, _ := DecisionFrom(c)
				mu.Lock()
				local = append(local, d.Local)
				mu.Unlock()
				g.handle(c)
			})
			if tc.how == "saturated" {
				saturate(t, l)
			}
			codes := make(chan int, 5)
			for range 5 {
				go func() {
					r := httptest.NewRequest(http.MethodGet, "/order", nil)
					if tc.how == "ended" {
						ctx, cancel := context.WithCancel(r.Context())
						cancel()
						r = r.WithContext(ctx)
					}
					w := httptest.NewRecorder()
					e.ServeHTTP(w, r)
					codes <- w.Code
				}()
			}
			in, out := 0, 0
			deadline := time.After(slotWait)
			for in+out < 5 {
				select {
				case <-g.entered:
					in++
				case code := <-codes:
					if code != tc.code {
						t.Errorf("a refused request got %d, want %d", code, tc.code)
					}
					out++
				case <-deadline:
					t.Fatalf("%d in, %d out", in, out)
				}
			}
			if in != tc.in {
				t.Errorf("%d requests got in, want %d", in, tc.in)
			}
			g.open()
			for range in {
				<-codes
			}
			mu.Lock()
			for _, isLocal := range local {
				if isLocal != (tc.fp == FailLocal) {
					t.Errorf("an admitted request's decision has Local %v", isLocal)
				}
			}
			mu.Unlock()
			if tc.fp == FailLocal && tc.how != "saturated" {
				// Released in process too: the slots are free again.
				if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
					t.Errorf("after the release: %d, want 200", w.Code)
				}
			}
		})
	}
}

// TestInFlightOptions: InFlight's bounds, and what an in-flight rule
// refuses, are checked at start-up and name the option.
func TestInFlightOptions(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	l := slotLimiter(t, c)
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{InFlight(0, time.Second)}, "InFlight(0, 1s): n must be from 1"},
		{[]Option{InFlight(1_000_001, time.Second)}, "InFlight(1000001, 1s)"},
		{[]Option{InFlight(1, 0)}, "InFlight(1, 0s): the lease must be from 1ms to 1h0m0s"},
		{[]Option{InFlight(1, 2*time.Hour)}, "InFlight(1, 2h0m0s): the lease"},
		{[]Option{InFlight(1, time.Second), costOf(2)}, "holds one slot per request"},
		{[]Option{InFlight(1, time.Second), LimitBy(func(*gin.Context) string { return "" }, map[string]int{"a": 1})}, "no limits per request"},
	} {
		if _, err := l.Policy(tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
	p, err := l.Policy(InFlight(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allow(context.Background(), "k", 1); err == nil {
		t.Error("Allow on a policy with an in-flight rule: no error")
	}
}

// TestInFlightOOMRefusedBeforeAnyWrite: on a redis-server at maxmemory with
// noeviction, an acquire that would take a slot gets Redis's OOM error
// before the script writes anything (not even the sweep of a lapsed lease),
// so FailClosed answers 503; a refusal for want of a slot still answers
// 429.
func TestInFlightOOMRefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	p, err := slotLimiter(t, c, OnFailure(FailClosed), withBreaker(0, 0), withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))).
		Policy(Key(prefix(t)), InFlight(1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Minute).UnixMicro()
	p.route.Clock = func() int64 { return now }
	die(t, p) // a slot held by an instance that died
	e := slotEngine(p.route.Serve, newGate())
	before := dump(t, srv)
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.ConfigSet(ctx, "maxmemory", "0").Err() })
	now++
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("no slot free at maxmemory: %d, want 429", w.Code)
	}
	now += time.Hour.Microseconds() // the dead holder's lease has lapsed
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("an acquire at maxmemory: %d, want FailClosed's 503 (Redis's OOM error)", w.Code)
	}
	if after := dump(t, srv); !maps.Equal(before, after) {
		t.Fatalf("the script wrote at maxmemory:\nbefore %v\nafter  %v", before, after)
	}
}

// panicOnce is an observer that panics on its first event, as a metrics
// collector with a bad label set does.
type panicOnce struct{ done bool }

func (p *panicOnce) Observe(context.Context, Event) {
	if !p.done {
		p.done = true
		panic("observer failed")
	}
}

// TestInFlightObserverPanicReleasesTheSlot: InFlight promises the slot is
// given back "when the chain returns, a panic included". An observer runs
// after the slot is taken; when it panics, gin's recovery answers 500, and
// the slot must still be released: a release deferred only after the
// observers (serve) would never run, and the lease, renewed every lease/3
// for ever, would lose the slot until the process exits, not until the
// lease ends.
func TestInFlightObserverPanicReleasesTheSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := slotLimiter(t, srv.Client())
	const lease = 300 * time.Millisecond
	p, err := l.Policy(Key(prefix(t)), InFlight(1, lease), Observe((&panicOnce{}).Observe))
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	defer g.open()
	e := slotEngine(p.route.Serve, g)
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusInternalServerError {
		t.Fatalf("the panicking observer: %d, want gin's recovery's 500", w.Code)
	}
	time.Sleep(4 * lease) // well past the lease: a slot nobody renews is free by now
	if n := held(t, p, ""); n != 0 {
		t.Errorf("%d slots held %v after the request ended, want 0", n, 4*lease)
	}
	if w := do(e, http.MethodGet, "/order?fast=1", nil); w.Code != http.StatusOK {
		t.Errorf("the next request: %d, want 200 (the only slot leaked)", w.Code)
	}
}

// TestInFlightDeadlineReleasesTheSlot: a request whose context ends while
// its acquire is on the wire (a client that hangs up, a timeout middleware)
// must not be taken as ErrSaturated ("the call never left this process")
// with no release sent: the script did run and leased a slot, which would
// stay taken until its lease ends (30 s here) while nothing holds it.
// Redis is made to answer late by a 600 ms DEBUG SLEEP on another connection.
func TestInFlightDeadlineReleasesTheSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := slotLimiter(t, srv.Client())
	p, err := l.Policy(Key(prefix(t)), InFlight(1, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/order", p.route.Serve, ok)
	busy := make(chan error, 1)
	go func() {
		c := srv.Client()
		defer c.Close()
		busy <- c.Do(context.Background(), "DEBUG", "SLEEP", "0.6").Err()
	}()
	time.Sleep(100 * time.Millisecond) // the sleep has started
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/order", nil).WithContext(ctx))
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := held(t, p, ""); n != 0; n = held(t, p, "") {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots held 5 s after the request (answered %d) ended, want 0: the acquire ran after the request gave up, and nothing released it", n, w.Code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
