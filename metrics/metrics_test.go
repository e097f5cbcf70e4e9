package metrics_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/internal/promtest"
	"github.com/ginlimit/ginlimit/metrics"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no route dump or debug warnings
	os.Exit(m.Run())
}

// The metric names, as package metrics documents them.
const (
	decisions = promtest.Decisions
	latency   = promtest.Latency
	nearLimit = promtest.NearLimit
	denyCache = promtest.DenyCacheHits
	breaker   = promtest.BreakerOpen
)

var errDown = errors.New("redis: connection refused")

// ev is the event of decision d of rule on route, as ginlimit makes it.
func ev(route, rule string, d ginlimit.Decision) ginlimit.Event {
	d.Rule = rule
	return ginlimit.Event{Route: route, Rule: rule, Outcome: metrics.Classify(d), Decision: d, Latency: time.Millisecond}
}

// Decisions of every outcome.
var (
	allowed       = ginlimit.Decision{Allowed: true, Limit: 10, Remaining: 5}
	limited       = ginlimit.Decision{Limit: 10, RetryAfter: time.Second}
	shadowLimited = ginlimit.Decision{Limit: 10, Shadow: true}
	failedOpen    = ginlimit.Decision{Allowed: true, Limit: 10, Err: errDown}
	failedClosed  = ginlimit.Decision{Limit: 10, Err: errDown}
	fallback      = ginlimit.Decision{Allowed: true, Limit: 10, Remaining: 3, Local: true, Err: errDown}
	clientGone    = ginlimit.Decision{Limit: 10, Err: fmt.Errorf("ginlimit: GET /a: %w", ginlimit.ErrClientGone)}
	saturated     = ginlimit.Decision{Limit: 10, Err: fmt.Errorf("ginlimit: GET /a: %w", ginlimit.ErrSaturated)}
)

func TestMetricLabels(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	c.Observe(t.Context(), ev("GET /api/coupon/claim", "coupon:claim", allowed))

	want := map[string]struct {
		typ    dto.MetricType
		labels []string
	}{
		decisions: {dto.MetricType_COUNTER, []string{"decision", "route", "rule"}},
		latency:   {dto.MetricType_HISTOGRAM, []string{"route", "rule"}},
		nearLimit: {dto.MetricType_COUNTER, []string{"route", "rule"}},
		denyCache: {dto.MetricType_COUNTER, []string{"route", "rule"}},
		breaker:   {dto.MetricType_GAUGE, []string{"route", "rule"}},
	}
	s := promtest.Scrape(t, c)
	if len(s) != len(want) {
		t.Errorf("%d metric families, want %d: %v", len(s), len(want), slices.Sorted(maps.Keys(s)))
	}
	for name, w := range want {
		mf, ok := s[name]
		if !ok {
			t.Errorf("no metric %s", name)
			continue
		}
		if mf.GetType() != w.typ {
			t.Errorf("%s: type %v, want %v", name, mf.GetType(), w.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help", name)
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, p := range m.GetLabel() {
				got = append(got, p.GetName())
				if p.GetName() == "route" && p.GetValue() != "GET /api/coupon/claim" ||
					p.GetName() == "rule" && p.GetValue() != "coupon:claim" {
					t.Errorf("%s: label %s=%q", name, p.GetName(), p.GetValue())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, w.labels) {
				t.Errorf("%s: labels %v, want %v", name, got, w.labels)
			}
		}
	}
	// Every outcome's series exists from the first decision of the pair, at
	// zero, so that rate() has a starting point.
	for _, o := range []string{"allowed", "limited", "shadow_limited", "error", "fallback"} {
		if _, ok := s.Get(decisions, "route", "GET /api/coupon/claim", "rule", "coupon:claim", "decision", o); !ok {
			t.Errorf("no %s series for decision=%q", decisions, o)
		}
	}
}

func TestLint(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	c.Observe(t.Context(), ev("GET /a", "a", allowed))
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		event ginlimit.Event
		want  string
	}{
		{"allowed", ev("GET /a", "a", allowed), "allowed"},
		{"limited", ev("GET /a", "a", limited), "limited"},
		{"shadow limited", ev("GET /a", "a", shadowLimited), "shadow_limited"},
		{"error, fail open", ev("GET /a", "a", failedOpen), "error"},
		{"error, fail closed", ev("GET /a", "a", failedClosed), "error"},
		{"fallback", ev("GET /a", "a", fallback), "fallback"},
		{"client gone", ev("GET /a", "a", clientGone), "client_gone"},
		{"saturated", ev("GET /a", "a", saturated), "saturated"},
		{"no outcome: classified from the decision",
			ginlimit.Event{Route: "GET /a", Rule: "a", Decision: limited}, "limited"},
		{"unknown outcome: classified from the decision",
			ginlimit.Event{Route: "GET /a", Rule: "a", Outcome: "throttled", Decision: shadowLimited}, "shadow_limited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := metrics.New()
			c.Observe(t.Context(), tt.event)
			s := promtest.Scrape(t, c)
			for _, o := range []string{"allowed", "limited", "shadow_limited", "error", "saturated", "fallback", "client_gone"} {
				want := 0.0
				if o == tt.want {
					want = 1
				}
				if got := s.Must(t, decisions, "route", "GET /a", "rule", "a", "decision", o); got != want {
					t.Errorf("decision=%q: %v, want %v", o, got, want)
				}
			}
			if n := len(s[decisions].GetMetric()); n != 8 {
				t.Errorf("%d decision series, want 8 (an unknown outcome must not add one)", n)
			}
		})
	}

	t.Run("every outcome in one collector", func(t *testing.T) {
		t.Parallel()
		c := metrics.New()
		for d, n := range map[*ginlimit.Decision]int{&allowed: 7, &limited: 5, &shadowLimited: 4, &failedOpen: 2, &failedClosed: 1, &fallback: 3, &saturated: 6} {
			for range n {
				c.Observe(t.Context(), ev("POST /b", "b", *d))
			}
		}
		s := promtest.Scrape(t, c)
		for o, want := range map[string]float64{"allowed": 7, "limited": 5, "shadow_limited": 4, "error": 3, "fallback": 3, "saturated": 6} {
			if got := s.Must(t, decisions, "route", "POST /b", "rule", "b", "decision", o); got != want {
				t.Errorf("decision=%q: %v, want %v", o, got, want)
			}
		}
		if got := s.Must(t, latency, "route", "POST /b", "rule", "b"); got != 28 {
			t.Errorf("%s count: %v, want 28 (every decision)", latency, got)
		}
	})
}

func TestNearLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []metrics.Option
		d    ginlimit.Decision
		want float64
	}{
		{"default 0.1: 9 of 100 left", nil, ginlimit.Decision{Allowed: true, Limit: 100, Remaining: 9}, 1},
		{"default 0.1: 10 of 100 left", nil, ginlimit.Decision{Allowed: true, Limit: 100, Remaining: 10}, 0},
		{"default 0.1: 0 of 3 left", nil, ginlimit.Decision{Allowed: true, Limit: 3, Remaining: 0}, 1},
		{"default 0.1: 1 of 3 left", nil, ginlimit.Decision{Allowed: true, Limit: 3, Remaining: 1}, 0},
		{"limited is not near, it is over", nil, ginlimit.Decision{Limit: 3}, 0},
		{"shadow limited", nil, ginlimit.Decision{Limit: 3, Shadow: true}, 0},
		{"error, fail open: no counters", nil, ginlimit.Decision{Allowed: true, Limit: 3, Err: errDown}, 0},
		{"fallback", nil, ginlimit.Decision{Allowed: true, Limit: 3, Local: true, Err: errDown}, 0},
		{"0.5: 49 of 100 left", []metrics.Option{metrics.NearLimitFraction(0.5)}, ginlimit.Decision{Allowed: true, Limit: 100, Remaining: 49}, 1},
		{"0.5: 50 of 100 left", []metrics.Option{metrics.NearLimitFraction(0.5)}, ginlimit.Decision{Allowed: true, Limit: 100, Remaining: 50}, 0},
		{"0: never", []metrics.Option{metrics.NearLimitFraction(0)}, ginlimit.Decision{Allowed: true, Limit: 100, Remaining: 0}, 0},
		{"1: every admission", []metrics.Option{metrics.NearLimitFraction(1)}, ginlimit.Decision{Allowed: true, Limit: 100, Remaining: 99}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := metrics.New(tt.opts...)
			c.Observe(t.Context(), ev("GET /a", "a", tt.d))
			if got := promtest.Scrape(t, c).Must(t, nearLimit, "route", "GET /a", "rule", "a"); got != tt.want {
				t.Errorf("%s = %v, want %v", nearLimit, got, tt.want)
			}
		})
	}
}

func TestDenyCacheHits(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	cached := ginlimit.Decision{Limit: 3, RetryAfter: time.Second, Cached: true}
	cachedShadow := ginlimit.Decision{Limit: 3, RetryAfter: time.Second, Cached: true, Shadow: true}
	for _, d := range []ginlimit.Decision{allowed, limited, cached, cached, cachedShadow, limited} {
		c.Observe(t.Context(), ev("GET /a", "a", d))
	}
	c.Observe(t.Context(), ev("GET /b", "b", limited))
	s := promtest.Scrape(t, c)
	for _, tt := range []struct {
		route, rule string
		want        float64
	}{{"GET /a", "a", 3}, {"GET /b", "b", 0}} {
		if got := s.Must(t, denyCache, "route", tt.route, "rule", tt.rule); got != tt.want {
			t.Errorf("%s{route=%q}: %v, want %v", denyCache, tt.route, got, tt.want)
		}
	}
	if got := s.Must(t, decisions, "route", "GET /a", "rule", "a", "decision", "limited"); got != 4 {
		t.Errorf("limited: %v, want 4 (a cached rejection is a rejection)", got)
	}
}

func TestBreakerGauge(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	steps := []struct {
		route, state string
		want         float64
	}{
		{"GET /a", "", 0}, // breaker off
		{"GET /a", "closed", 0},
		{"GET /a", "open", 1},
		{"GET /b", "closed", 0}, // another route's breaker is its own
		{"GET /a", "half-open", 1},
		{"GET /a", "closed", 0},
		{"GET /a", "open", 1},
	}
	for i, st := range steps {
		e := ev(st.route, "r", failedOpen)
		e.Breaker = st.state
		c.Observe(t.Context(), e)
		if got := promtest.Scrape(t, c).Must(t, breaker, "route", st.route, "rule", "r"); got != st.want {
			t.Errorf("step %d: %s{route=%q} after %q: %v, want %v", i, breaker, st.route, st.state, got, st.want)
		}
	}
	if got := promtest.Scrape(t, c).Must(t, breaker, "route", "GET /b", "rule", "r"); got != 0 {
		t.Errorf("%s{route=GET /b}: %v, want 0", breaker, got)
	}
}

func TestLatencyHistogram(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	for _, d := range []time.Duration{40 * time.Microsecond, 3 * time.Millisecond, 3 * time.Millisecond, 2 * time.Second} {
		e := ev("GET /a", "a", allowed)
		e.Latency = d
		c.Observe(t.Context(), e)
	}
	mf := promtest.Scrape(t, c)[latency]
	if len(mf.GetMetric()) != 1 {
		t.Fatalf("%d series, want 1", len(mf.GetMetric()))
	}
	h := mf.GetMetric()[0].GetHistogram()
	var bounds []float64
	cumulative := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	wantBounds := []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	if !slices.Equal(bounds, wantBounds) {
		t.Errorf("buckets %v, want %v", bounds, wantBounds)
	}
	for le, want := range map[float64]uint64{0.00005: 1, 0.0025: 1, 0.005: 3, 1: 3} {
		if got := cumulative[le]; got != want {
			t.Errorf("le=%v: %d, want %d", le, got, want)
		}
	}
	if h.GetSampleCount() != 4 {
		t.Errorf("count %d, want 4", h.GetSampleCount())
	}
	if want := 2.00604; math.Abs(h.GetSampleSum()-want) > 1e-9 {
		t.Errorf("sum %v, want %v", h.GetSampleSum(), want)
	}
}

// TestMaxSeries feeds 5,000 distinct routes: the first DefaultMaxSeries keep
// their labels, the rest fold into route="other", rule="other", and the
// totals stay exact.
func TestMaxSeries(t *testing.T) {
	t.Parallel()
	const routes = 5000
	c := metrics.New()
	for i := range routes {
		c.Observe(t.Context(), ev(fmt.Sprintf("GET /tenant-%d/orders", i), "orders", allowed))
	}
	// A pair seen before the cap keeps its own series; one seen after stays
	// folded.
	c.Observe(t.Context(), ev("GET /tenant-0/orders", "orders", limited))
	c.Observe(t.Context(), ev("GET /tenant-4999/orders", "orders", limited))

	s := promtest.Scrape(t, c)
	for _, name := range []string{decisions, latency, nearLimit, denyCache, breaker} {
		pairs := s.Pairs(name)
		if len(pairs) > metrics.DefaultMaxSeries+1 {
			t.Errorf("%s: %d (route, rule) pairs, want at most %d", name, len(pairs), metrics.DefaultMaxSeries+1)
		}
		if !pairs[[2]string{metrics.Other, metrics.Other}] {
			t.Errorf("%s: no route=%q, rule=%q series", name, metrics.Other, metrics.Other)
		}
	}
	if n := len(s[decisions].GetMetric()); n != (metrics.DefaultMaxSeries+1)*8 {
		t.Errorf("%s: %d series, want %d", decisions, n, (metrics.DefaultMaxSeries+1)*8)
	}
	for _, tt := range []struct {
		route, rule, decision string
		want                  float64
	}{
		{"GET /tenant-0/orders", "orders", "allowed", 1},
		{"GET /tenant-0/orders", "orders", "limited", 1},
		{"GET /tenant-999/orders", "orders", "allowed", 1},
		{metrics.Other, metrics.Other, "allowed", routes - metrics.DefaultMaxSeries},
		{metrics.Other, metrics.Other, "limited", 1},
	} {
		if got := s.Must(t, decisions, "route", tt.route, "rule", tt.rule, "decision", tt.decision); got != tt.want {
			t.Errorf("%s{route=%q,decision=%q}: %v, want %v", decisions, tt.route, tt.decision, got, tt.want)
		}
	}
	if _, ok := s.Get(decisions, "route", "GET /tenant-1000/orders", "rule", "orders", "decision", "allowed"); ok {
		t.Errorf("the 1001st route has its own series")
	}
	if got := s.Sum(decisions); got != routes+2 {
		t.Errorf("sum of %s: %v, want %d: folding must not lose decisions", decisions, got, routes+2)
	}
}

func TestMaxSeriesCountsPairs(t *testing.T) {
	t.Parallel()
	c := metrics.New(metrics.MaxSeries(2))
	for _, e := range []ginlimit.Event{
		ev("GET /a", "x", allowed),
		ev("GET /a", "y", allowed), // same route, another rule: another pair
		ev("GET /a", "x", allowed),
		ev("GET /b", "x", allowed), // the third pair
		ev("GET /a", "y", limited),
	} {
		c.Observe(t.Context(), e)
	}
	s := promtest.Scrape(t, c)
	want := map[[2]string]bool{{"GET /a", "x"}: true, {"GET /a", "y"}: true, {metrics.Other, metrics.Other}: true}
	if got := s.Pairs(decisions); !maps.Equal(got, want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
	for _, tt := range []struct {
		route, rule, decision string
		want                  float64
	}{
		{"GET /a", "x", "allowed", 2},
		{"GET /a", "y", "allowed", 1},
		{"GET /a", "y", "limited", 1},
		{metrics.Other, metrics.Other, "allowed", 1},
	} {
		if got := s.Must(t, decisions, "route", tt.route, "rule", tt.rule, "decision", tt.decision); got != tt.want {
			t.Errorf("%s{route=%q,rule=%q,decision=%q}: %v, want %v", decisions, tt.route, tt.rule, tt.decision, got, tt.want)
		}
	}
}

// TestUnmatchedRoute: on a request that matched no route the method is the
// client's choice, so every such route is one label value.
func TestUnmatchedRoute(t *testing.T) {
	t.Parallel()
	c := metrics.New(metrics.MaxSeries(3))
	for i := range 100 {
		c.Observe(t.Context(), ev(fmt.Sprintf("X-METHOD-%d ", i), "nf", allowed))
	}
	c.Observe(t.Context(), ev("GET ", "nf", limited))
	c.Observe(t.Context(), ev("", "policy", allowed)) // outside gin: kept as it is
	s := promtest.Scrape(t, c)
	want := map[[2]string]bool{{metrics.Unmatched, "nf"}: true, {"", "policy"}: true}
	if got := s.Pairs(decisions); !maps.Equal(got, want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
	if got := s.Must(t, decisions, "route", metrics.Unmatched, "rule", "nf", "decision", "allowed"); got != 100 {
		t.Errorf("unmatched allowed: %v, want 100", got)
	}
}

func TestInvalidUTF8Label(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	c.Observe(t.Context(), ev("GET /caf\xe9", "r\xff", allowed)) // must not panic
	for p := range promtest.Scrape(t, c).Pairs(decisions) {
		if !utf8.ValidString(p[0]) || !utf8.ValidString(p[1]) {
			t.Errorf("label values %q are not valid UTF-8", p)
		}
	}
}

func TestNewPanicsOnInvalidOption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opt  metrics.Option
		want string
	}{
		{metrics.NearLimitFraction(-0.1), "metrics: NearLimitFraction(-0.1): the fraction must be from 0 to 1"},
		{metrics.NearLimitFraction(1.5), "metrics: NearLimitFraction(1.5)"},
		{metrics.NearLimitFraction(math.NaN()), "metrics: NearLimitFraction(NaN)"},
		{metrics.MaxSeries(0), "metrics: MaxSeries(0): the cap must be at least 1"},
		{metrics.MaxSeries(-5), "metrics: MaxSeries(-5)"},
		{nil, "metrics: New: an option is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("New panicked with %v, want an error containing %q", r, tt.want)
				}
			}()
			metrics.New(tt.opt)
		})
	}
}

// TestConcurrentObserve observes from many goroutines while scraping, over
// more pairs than the cap, and requires exact totals. Run it with -race.
func TestConcurrentObserve(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 32
		each       = 2000
		pairs      = 50
		maxSeries  = 20
	)
	c := metrics.New(metrics.MaxSeries(maxSeries))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	stop := make(chan struct{})
	var scrapes sync.WaitGroup
	scrapes.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("Gather: %v", err)
				return
			}
		}
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				d := allowed
				if i%4 == 0 {
					d = limited
				}
				e := ev(fmt.Sprintf("GET /p%d", (g+i)%pairs), "r", d)
				e.Breaker = []string{"closed", "open"}[i%2]
				c.Observe(t.Context(), e)
			}
		})
	}
	wg.Wait()
	close(stop)
	scrapes.Wait()

	s := promtest.Scrape(t, c)
	if got, want := s.Sum(decisions), float64(goroutines*each); got != want {
		t.Errorf("sum of %s: %v, want %v", decisions, got, want)
	}
	if got := len(s.Pairs(decisions)); got != maxSeries+1 {
		t.Errorf("%d pairs, want %d", got, maxSeries+1)
	}
	var count uint64
	for _, m := range s[latency].GetMetric() {
		count += m.GetHistogram().GetSampleCount()
	}
	if count != goroutines*each {
		t.Errorf("%s count %d, want %d", latency, count, goroutines*each)
	}
}

// TestEndToEnd runs real routes on gin and miniredis with the collector as
// their observer, and reads the counters back from /metrics.
