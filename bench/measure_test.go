package main

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit"
)

func TestHistogramBucketsAreContiguousAndPrecise(t *testing.T) {
	for v := uint64(1); v < 1<<20; v++ {
		if d := histIndex(v) - histIndex(v-1); d != 0 && d != 1 {
			t.Fatalf("histIndex(%d) - histIndex(%d) = %d: buckets are not contiguous", v, v-1, d)
		}
		if got := histValue(histIndex(v)); math.Abs(float64(got)-float64(v)) > float64(v)/histHalf+1 {
			t.Fatalf("histValue(histIndex(%d)) = %d: more than 1/%d off", v, got, histHalf)
		}
	}
	if i := histIndex(math.MaxInt64); i >= histBuckets {
		t.Fatalf("histIndex(MaxInt64) = %d, want < %d", i, histBuckets)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(c.q)
		if math.Abs(float64(got-c.want)) > float64(c.want)/histHalf {
			t.Errorf("quantile(%v) = %v, want %v within 1/%d", c.q, got, c.want, histHalf)
		}
	}
	o := newHistogram()
	o.merge(h)
	if o.n != 1000 || o.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merged histogram: n = %d, p50 = %v; want 1000, %v", o.n, o.quantile(0.5), h.quantile(0.5))
	}
}

func TestSelectCases(t *testing.T) {
	cs, withHTTP, err := selectCases("ginlimit, redis_rate,http")
	if err != nil || len(cs) != 2 || !withHTTP || cs[0].ID != "redis_rate" || cs[1].ID != "ginlimit" {
		t.Fatalf("selectCases = %v, %v, %v; want redis_rate and ginlimit in report order, with http", cs, withHTTP, err)
	}
	if _, _, err := selectCases("nope"); err == nil {
		t.Fatal("selectCases(nope): no error")
	}
}

func TestCasesCoverEveryAlgorithm(t *testing.T) {
	prefixes := map[string]string{}
	ids := map[string]bool{}
	for _, c := range allCases() {
		if ids[c.ID] {
			t.Errorf("case ID %q twice", c.ID)
		}
		ids[c.ID] = true
		if c.Floor {
			continue
		}
		p := c.RedisKey("x")
		if other, ok := prefixes[p]; ok {
			t.Errorf("cases %s and %s write the same Redis key %q", other, c.ID, p)
		}
		prefixes[p] = c.ID
		if c.FloodOnly && (!c.Flood || c.Memory || c.Floor) {
			t.Errorf("%s: FloodOnly must be in the flood only", c.ID)
		}
		if c.CostOnly && (c.Flood || c.Floor || c.FloodOnly) {
			t.Errorf("%s: CostOnly must be in the script-cost section (and memory) only", c.ID)
		}
	}
	// Each ginlimit algorithm: in the throughput tables, the memory table and
	// the flood with the deny cache off, and in the flood with it on.
	for _, id := range []string{"ginlimit", "ginlimit-counter", "ginlimit-fixed", "ginlimit-bucket"} {
		cs, _, err := selectCases(id + "," + id + "-defaults")
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 2 || cs[0].FloodOnly || !cs[0].Memory || !cs[0].Flood || !cs[1].Flood {
			t.Errorf("%s: want a throughput, memory and flood case and a flood case with the defaults", id)
		}
	}
}

func TestRoundOrderRotates(t *testing.T) {
	const n = 5
	seen := make([]map[int]bool, n) // positions each case ran in
	for i := range seen {
		seen[i] = map[int]bool{}
	}
	for round := range n {
		order := roundOrder(n, round)
		ran := map[int]bool{}
		for pos, i := range order {
			ran[i] = true
			seen[i][pos] = true
		}
		if len(ran) != n {
			t.Fatalf("round %d: order %v does not run every case once", round, order)
		}
		if round > 0 && order[0] == roundOrder(n, round-1)[0] {
			t.Errorf("round %d: order %v starts with the same case as the round before", round, order)
		}
	}
	for i, pos := range seen {
		if len(pos) != n {
			t.Errorf("case %d ran in positions %v over %d rounds, want every position once", i, pos, n)
		}
	}
}

func TestDefaultLevels(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 32, 256, 1024} {
		if !slices.Contains(cfg.callers, n) {
			t.Errorf("default -callers %v: no %d", cfg.callers, n)
		}
	}
	if len(cfg.httpCallers) == 0 {
		t.Error("no default -http-callers")
	}
}

func TestPlainAndContextTimeoutDefaults(t *testing.T) {
	cs, _, err := selectCases("ginlimit-defaults-plain,ginlimit-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Client != plainClient || cs[1].Client != ctxTimeoutClient || cs[0].FloodOnly || cs[1].FloodOnly {
		t.Fatalf("want the plain-client and the ContextTimeoutEnabled defaults cases in the throughput tables, got %v", cs)
	}
	if o := plainClient.newClient("127.0.0.1:1").Options(); o.ContextTimeoutEnabled {
		t.Error("plain client has ContextTimeoutEnabled")
	}
	if o := ctxTimeoutClient.newClient("127.0.0.1:1").Options(); !o.ContextTimeoutEnabled {
		t.Error("ContextTimeoutEnabled client has it off")
	}
}

func TestNotDecided(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		d    ginlimit.Decision
		err  error
		want bool // a non-decision
	}{
		{"admitted", ginlimit.Decision{Allowed: true}, nil, false},
		{"rejected", ginlimit.Decision{}, nil, false},
		{"cached rejection", ginlimit.Decision{Cached: true}, nil, false},
		{"error from Allow", ginlimit.Decision{Allowed: true, Local: true}, boom, true},
		{"error in the decision", ginlimit.Decision{Allowed: true, Err: boom}, nil, true},
		{"fallback without an error", ginlimit.Decision{Allowed: true, Local: true}, nil, true},
	} {
		if got := notDecided(c.d, c.err) != nil; got != c.want {
			t.Errorf("%s: non-decision %v, want %v", c.name, got, c.want)
		}
	}
}

// A ginlimit case on a Redis that refuses connections is answered by the
// FailLocal fallback: every call must come back as a non-decision.
func TestGinlimitFallbackIsANonDecision(t *testing.T) {
	for _, kind := range []clientKind{plainClient, ctxTimeoutClient} {
		rdb := kind.newClient(closedAddr(t))
		defer rdb.Close()
		d, err := newGinlimit("test:")(rdb, 10, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := d(context.Background(), "k")
		if err == nil {
			t.Errorf("%s client: Redis down, admitted %v with no error: counted as a decision", kind.Short(), ok)
		}
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestHTTPDecider(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Forwarded-For") {
		case "ok":
		case "limited":
			w.WriteHeader(http.StatusTooManyRequests)
		case "fallback":
			w.Header().Set(hdrNonDecision, "saturated")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	d := httpDecider(srv.Client(), srv.URL+"/r/1")
	for _, c := range []struct {
		key       string
		allowed   bool
		nonDec    bool
		saturated bool
	}{{"ok", true, false, false}, {"limited", false, false, false}, {"fallback", false, true, true}, {"down", false, true, false}} {
		ok, err := d(context.Background(), c.key)
		if ok != c.allowed || (err != nil) != c.nonDec || errors.Is(err, ginlimit.ErrSaturated) != c.saturated {
			t.Errorf("%s: allowed %v, error %v; want allowed %v, non-decision %v, ErrSaturated %v", c.key, ok, err, c.allowed, c.nonDec, c.saturated)
		}
	}
}

// TestSeedsOnRedisTime: the reference case is the recipe with its clock
// line, and only that, replaced by a read of TIME.
func TestSeedsOnRedisTime(t *testing.T) {
	src := seedsOnRedisTimeScript.Hash()
	if src == seedsScript.Hash() {
		t.Fatal("the Redis-clock recipe is the recipe itself: its clock line was not replaced")
	}
	if !strings.Contains(seedsSource, "local now = tonumber(ARGV[1])") {
		t.Fatal("the recipe has no clock line to replace")
	}
}
