package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/metrics"
)

// Example wires a Collector into a limiter and serves the metrics on
// /metrics, next to the limited routes.
func Example() {
	mr := miniredis.NewMiniRedis() // stands in for a real Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	collector := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Observe(collector.Observe),
		ginlimit.Timeout(5*time.Second)) // miniredis runs the scripts in this process: slow under -race
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/voucher-order/seckill/:id", limiter.RateLimit(
		ginlimit.Key("voucher:seckill:"), ginlimit.Window(10*time.Second), ginlimit.Limit(2)),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	// Not limited. In production, serve it to Prometheus only, for example
	// on an internal listener.
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))

	for _, id := range []string{"1", "2", "3", "4"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/voucher-order/seckill/"+id, nil))
		fmt.Println(w.Code)
	}

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sc := bufio.NewScanner(w.Body)
	// The counters. Left out: the latency histogram, which varies from run
	// to run, and the deny cache's hits, which depend on when the limiter's
	// reset subscription came up (the deny cache learns only once it is;
	// New waits for it up to a second, which a loaded machine can outlast).
	// TestEndToEnd and TestDenyCacheHits count the hits.
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "ginlimit_") && !strings.HasPrefix(line, "ginlimit_decision_seconds") &&
			!strings.HasPrefix(line, "ginlimit_deny_cache_hits_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// 200
	// 200
	// 429
	// 429
	// ginlimit_breaker_open{route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_decisions_total{decision="allowed",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 2
	// ginlimit_decisions_total{decision="banned",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_decisions_total{decision="client_gone",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_decisions_total{decision="error",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_decisions_total{decision="fallback",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_decisions_total{decision="limited",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 2
	// ginlimit_decisions_total{decision="saturated",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_decisions_total{decision="shadow_limited",route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 0
	// ginlimit_near_limit_total{route="GET /voucher-order/seckill/:id",rule="voucher:seckill"} 1
}

// ExampleMaxSeries shows the cap on (route, rule) label pairs: the pairs seen
// after it are counted under route="other", rule="other".
func ExampleMaxSeries() {
	collector := metrics.New(metrics.MaxSeries(2))
	ctx := context.Background()
	for _, route := range []string{"GET /a", "GET /b", "GET /c", "GET /d", "GET /a"} {
		d := ginlimit.Decision{Rule: "r", Allowed: true, Limit: 10, Remaining: 5}
		collector.Observe(ctx, ginlimit.Event{Route: route, Rule: "r", Outcome: ginlimit.OutcomeAllowed, Decision: d})
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		if mf.GetName() != "ginlimit_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["decision"] == "allowed" {
				fmt.Printf("route=%q rule=%q %v\n", l["route"], l["rule"], m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// route="GET /a" rule="r" 2
	// route="GET /b" rule="r" 1
	// route="other" rule="other" 2
}
