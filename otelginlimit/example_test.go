package otelginlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/otelginlimit"
)

// Example reports a route's decisions to OpenTelemetry: each one as an
// event on the request's span, and as metrics. Here the providers are the
// SDK's in-memory ones; an application gives its own, exporting over OTLP,
// and a middleware such as otelgin starts the request's span.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	m, err := otelginlimit.NewMetrics(mp)
	if err != nil {
		panic(err)
	}
	// miniredis runs the scripts in this process, slowly under -race on a
	// busy machine; a Redis of its own answers well within DefaultTimeout.
	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second),
		ginlimit.Observe(otelginlimit.Trace), ginlimit.Observe(m.Observe))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	r := gin.New()
	r.Use(func(c *gin.Context) { // what otelgin does
		ctx, span := tp.Tracer("example").Start(c.Request.Context(), c.FullPath())
		defer span.End()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	})
	r.GET("/ping", limiter.RateLimit(ginlimit.Key("ping:"), ginlimit.Name("ping"), ginlimit.Limit(2)),
		func(c *gin.Context) { c.String(http.StatusOK, "pong") })
	for range 3 {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/ping", nil))
	}

	for _, s := range spans.Ended() {
		for _, ev := range s.Events() {
			fmt.Print(ev.Name)
			for _, kv := range ev.Attributes {
				if kv.Key != "ginlimit.retry_after" {
					fmt.Printf(" %s=%s", kv.Key, kv.Value.String())
				}
			}
			fmt.Println()
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, metric := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := metric.Data.(metricdata.Sum[int64]); ok && metric.Name == "ginlimit.decisions" {
			for _, p := range sum.DataPoints {
				decision, _ := p.Attributes.Value("decision")
				fmt.Printf("%s{decision=%s} %d\n", metric.Name, decision.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// ginlimit.decision ginlimit.rule=ping ginlimit.outcome=allowed ginlimit.limit=2 ginlimit.remaining=1
	// ginlimit.decision ginlimit.rule=ping ginlimit.outcome=allowed ginlimit.limit=2 ginlimit.remaining=0
	// ginlimit.decision ginlimit.rule=ping ginlimit.outcome=limited ginlimit.limit=2 ginlimit.remaining=0
	// ginlimit.decisions{decision=allowed} 2
	// ginlimit.decisions{decision=limited} 1
}
