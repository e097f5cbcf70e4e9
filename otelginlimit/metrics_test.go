package otelginlimit_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/promtest"
	"github.com/ginlimit/ginlimit/metrics"
	"github.com/ginlimit/ginlimit/otelginlimit"
)

// promName is the Prometheus name of each OpenTelemetry instrument, as
// the package documentation maps them.
var promName = map[string]string{
	"ginlimit.decisions":         "ginlimit_decisions_total",
	"ginlimit.decision.duration": "ginlimit_decision_seconds",
	"ginlimit.near_limit":        "ginlimit_near_limit_total",
	"ginlimit.deny_cache.hits":   "ginlimit_deny_cache_hits_total",
	"ginlimit.breaker.open":      "ginlimit_breaker_open",
	"ginlimit.resets":            "ginlimit_resets_total",
	"ginlimit.reset.last":        "ginlimit_last_reset_timestamp_seconds",
	"ginlimit.identity.failures": "ginlimit_identity_failures_total",
}

// mirrorEvents are decisions of every outcome, a reset, identity failures
// of every reason, an unmatched route, a label that is not UTF-8 and more
// pairs than the cap of 4, for both exporters to see.
func mirrorEvents() []ginlimit.Event {
	down := fmt.Errorf("redis down")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(route, rule string, outcome ginlimit.Outcome, d ginlimit.Decision) ginlimit.Event {
		d.Rule = rule
		return ginlimit.Event{Route: route, Rule: rule, Outcome: outcome, Decision: d, Latency: 3 * time.Millisecond, Breaker: "closed"}
	}
	evs := []ginlimit.Event{
		ev("GET /a", "r", ginlimit.OutcomeAllowed, ginlimit.Decision{Allowed: true, Limit: 10, Remaining: 9}),
		ev("GET /a", "r", ginlimit.OutcomeAllowed, ginlimit.Decision{Allowed: true, Limit: 10, Remaining: 0}),
		ev("GET /a", "r", ginlimit.OutcomeLimited, ginlimit.Decision{Limit: 10, Cached: true, RetryAfter: time.Second}),
		ev("GET /a", "r", ginlimit.OutcomeShadowLimited, ginlimit.Decision{Limit: 10, Shadow: true}),
		ev("GET /b", "r", ginlimit.OutcomeError, ginlimit.Decision{Limit: 10, Err: down}),
		ev("GET /b", "r", ginlimit.OutcomeFallback, ginlimit.Decision{Allowed: true, Limit: 10, Local: true, Err: down}),
		ev("GET /b", "r", ginlimit.OutcomeBanned, ginlimit.Decision{Limit: 10, Banned: true}),
		ev("GET /b", "r", ginlimit.OutcomeClientGone, ginlimit.Decision{Limit: 10, Err: ginlimit.ErrClientGone}),
		ev("GET /b", "r", ginlimit.OutcomeSaturated, ginlimit.Decision{Limit: 10, Err: ginlimit.ErrSaturated}),
		ev("unmatched", "r", ginlimit.OutcomeAllowed, ginlimit.Decision{Allowed: true, Limit: 10, Remaining: 5}),
		ev("GET /\xff", "r\xfe", ginlimit.OutcomeAllowed, ginlimit.Decision{Allowed: true, Limit: 10, Remaining: 5}),
		ev("GET /past-the-cap", "r", ginlimit.OutcomeLimited, ginlimit.Decision{Limit: 10}),
		{Route: "GET /a", Rule: "r", Outcome: ginlimit.OutcomeReset, By: "admin", Decision: ginlimit.Decision{Rule: "r", Limit: 10, Remaining: 10, Time: at}},
	}
	evs[3].Breaker = "open"
	for _, reason := range append(identity.Reasons(), "made-up") {
		evs = append(evs, ginlimit.Event{Route: "GET /a", Rule: "r", Outcome: ginlimit.OutcomeUnauthorized, Reason: reason, Decision: ginlimit.Decision{Rule: "r"}})
	}
	return evs
}

// point is one series: its name and sorted attributes.
func point(name string, attrs map[string]string) string {
	keys := slices.Sorted(maps.Keys(attrs))
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, attrs[k])
	}
	return b.String()
}

// otelSeries flattens what reader collects: every data point by its
// Prometheus name and attributes, with its value (a histogram's count,
// sum and bounds).
func otelSeries(t *testing.T, reader *sdkmetric.ManualReader) map[string]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	attrsOf := func(s attribute.Set) map[string]string {
		m := map[string]string{}
		for _, kv := range s.ToSlice() {
			m[string(kv.Key)] = kv.Value.AsString()
		}
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelginlimit.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otelginlimit.ScopeName)
		}
		for _, m := range sm.Metrics {
			name, ok := promName[m.Name]
			if !ok {
				t.Errorf("instrument %q is not documented", m.Name)
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					out[point(name, attrsOf(p.Attributes))] = fmt.Sprint(float64(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					out[point(name, attrsOf(p.Attributes))] = fmt.Sprint(float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range data.DataPoints {
					out[point(name, attrsOf(p.Attributes))] = fmt.Sprint(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					out[point(name, attrsOf(p.Attributes))] = fmt.Sprint(p.Count, p.Sum, p.Bounds)
				}
			default:
				t.Errorf("instrument %q has data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// promSeries flattens a scrape of c the same way. A series at zero is
// left out: the collector makes a pair's series at zero, OpenTelemetry
// reports what was recorded.
func promSeries(t *testing.T, c *metrics.Collector) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, mf := range promtest.Scrape(t, c) {
		for _, m := range mf.GetMetric() {
			attrs := map[string]string{}
			for _, l := range m.GetLabel() {
				attrs[l.GetName()] = l.GetValue()
			}
			var v string
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				if m.GetCounter().GetValue() == 0 {
					continue
				}
				v = fmt.Sprint(m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				v = fmt.Sprint(m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				if h.GetSampleCount() == 0 {
					continue
				}
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				v = fmt.Sprint(h.GetSampleCount(), h.GetSampleSum(), bounds)
			}
			out[point(name, attrs)] = v
		}
	}
	return out
}

// TestMetricsMirrorPrometheus: the same events give the OpenTelemetry
// instruments exactly the series, attributes and values of the Prometheus
// collector, caps and folds included.
func TestMetricsMirrorPrometheus(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := otelginlimit.NewMetrics(mp, otelginlimit.MaxSeries(4))
	if err != nil {
		t.Fatal(err)
	}
	c := metrics.New(metrics.MaxSeries(4))
	for _, e := range mirrorEvents() {
		m.Observe(t.Context(), e)
		c.Observe(t.Context(), e)
	}
	got, want := otelSeries(t, reader), promSeries(t, c)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: OpenTelemetry %q, Prometheus %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: OpenTelemetry %q, not in Prometheus", k, v)
		}
	}
	// The fold and the reasons are there, so the comparison compared them.
	for _, k := range []string{
		point("ginlimit_decisions_total", map[string]string{"route": "other", "rule": "other", "decision": "limited"}),
		point("ginlimit_identity_failures_total", map[string]string{"route": "GET /a", "rule": "r", "reason": "other"}),
		point("ginlimit_identity_failures_total", map[string]string{"route": "GET /a", "rule": "r", "reason": "bad_signature"}),
	} {
		if _, ok := got[k]; !ok {
			t.Errorf("no series %s", k)
		}
	}
}

// TestNewMetricsErrors: invalid options and a nil provider are refused.
func TestNewMetricsErrors(t *testing.T) {
	t.Parallel()
	mp := sdkmetric.NewMeterProvider()
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"nil provider", func() error { _, err := otelginlimit.NewMetrics(nil); return err }, "MeterProvider is nil"},
		{"nil option", func() error { _, err := otelginlimit.NewMetrics(mp, nil); return err }, "option is nil"},
		{"MaxSeries(0)", func() error { _, err := otelginlimit.NewMetrics(mp, otelginlimit.MaxSeries(0)); return err }, "MaxSeries(0)"},
		{"NearLimitFraction(2)", func() error {
			_, err := otelginlimit.NewMetrics(mp, otelginlimit.NearLimitFraction(2))
			return err
		}, "NearLimitFraction(2)"},
	} {
		if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestDefaultsMatchPrometheus: the defaults are package metrics'.
func TestDefaultsMatchPrometheus(t *testing.T) {
	t.Parallel()
	if otelginlimit.DefaultMaxSeries != metrics.DefaultMaxSeries || otelginlimit.DefaultNearLimitFraction != metrics.DefaultNearLimitFraction {
		t.Fatal("the defaults differ from package metrics'")
	}
}
