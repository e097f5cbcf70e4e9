package otelginlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/otelginlimit"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// traced is a middleware that starts a span for each request, as otelgin
// does, and puts it in the request's context.
func traced(tp trace.TracerProvider) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, span := tp.Tracer("test").Start(c.Request.Context(), c.FullPath())
		defer span.End()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}
}

// tracedRoute serves GET /x, limited to limit per user (the uid header,
// read by identity.FromContext), under a recording tracer, and returns
// the engine and the recorder of its spans.
func tracedRoute(t *testing.T, limit int) (*gin.Engine, *tracetest.SpanRecorder) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := gin.New()
	e.Use(traced(tp), func(c *gin.Context) {
		if uid := c.GetHeader("uid"); uid != "" {
			c.Set("uid", uid)
		}
	})
	// Timeout(5s): the decisions run miniredis's Lua under the race
	// detector, which a loaded machine can keep past DefaultTimeout; a
	// decision that missed it would be traced as saturated.
	e.GET("/x", ginlimit.RateLimit(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.Key("trace-test:"), ginlimit.Name("per-user"),
		ginlimit.Limit(limit), ginlimit.Type(ginlimit.User), ginlimit.UserIdentity(identity.FromContext("uid")),
		ginlimit.Observe(otelginlimit.Trace)), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	return e, sr
}

// spanEvent returns the attributes of the "ginlimit.decision" event of
// the one span of the request, failing t unless there is exactly one.
func spanEvent(t *testing.T, sr *tracetest.SpanRecorder, span int) map[attribute.Key]attribute.Value {
	t.Helper()
	spans := sr.Ended()
	if len(spans) <= span {
		t.Fatalf("%d spans ended, want more than %d", len(spans), span)
	}
	var got []map[attribute.Key]attribute.Value
	for _, ev := range spans[span].Events() {
		if ev.Name != "ginlimit.decision" {
			continue
		}
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range ev.Attributes {
			m[kv.Key] = kv.Value
		}
		got = append(got, m)
	}
	if len(got) != 1 {
		t.Fatalf("span %d has %d ginlimit.decision events, want 1", span, len(got))
	}
	return got[0]
}

// TestTraceAddsTheDecisionToTheSpan: each decision shows on the request's
// span, with the rule, the outcome, the limit and the remaining quota
// (and the retry-after of a refusal, the reason of an identity failure),
// and nothing of the identity or the key.
func TestTraceAddsTheDecisionToTheSpan(t *testing.T) {
	t.Parallel()
	e, sr := tracedRoute(t, 1)
	const user = "user-8c1d2e"
	for _, uid := range []string{user, user, ""} {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		if uid != "" {
			req.Header.Set("uid", uid)
		}
		e.ServeHTTP(httptest.NewRecorder(), req)
	}
	want := []map[attribute.Key]attribute.Value{
		{"ginlimit.rule": attribute.StringValue("per-user"), "ginlimit.outcome": attribute.StringValue(string(ginlimit.OutcomeAllowed)),
			"ginlimit.limit": attribute.IntValue(1), "ginlimit.remaining": attribute.IntValue(0)},
		{"ginlimit.rule": attribute.StringValue("per-user"), "ginlimit.outcome": attribute.StringValue(string(ginlimit.OutcomeLimited)),
			"ginlimit.limit": attribute.IntValue(1), "ginlimit.remaining": attribute.IntValue(0)},
		{"ginlimit.rule": attribute.StringValue("per-user"), "ginlimit.outcome": attribute.StringValue(string(ginlimit.OutcomeUnauthorized)),
			"ginlimit.reason": attribute.StringValue(identity.ReasonMissing)},
	}
	for i, w := range want {
		got := spanEvent(t, sr, i)
		if i == 1 {
			ra, ok := got["ginlimit.retry_after"]
			if !ok || ra.AsFloat64() <= 0 || ra.AsFloat64() > 60 {
				t.Errorf("span %d: retry_after %v, want a positive number of seconds", i, ra.String())
			}
			delete(got, "ginlimit.retry_after")
		}
		if len(got) != len(w) {
			t.Errorf("span %d: attributes %v, want %v", i, got, w)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("span %d: %s = %v, want %v", i, k, got[k].String(), v.String())
			}
		}
		for k, v := range got {
			if s := v.String(); strings.Contains(s, user) || strings.Contains(s, "trace-test:") {
				t.Errorf("span %d: %s = %q holds the identity or the key", i, k, s)
			}
		}
	}
}

// TestTraceWithoutARecordingSpan: without a span, or with one that is not
// sampled, Trace does nothing (and does not panic).
func TestTraceWithoutARecordingSpan(t *testing.T) {
	t.Parallel()
	ev := ginlimit.Event{Rule: "r", Outcome: ginlimit.OutcomeAllowed}
	otelginlimit.Trace(context.Background(), ev)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := tp.Tracer("test").Start(context.Background(), "unsampled")
	otelginlimit.Trace(ctx, ev)
	span.End()
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans recorded with NeverSample, want 0", n)
	}
}
