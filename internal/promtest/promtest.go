// Package promtest reads a Prometheus collector's series in tests: one
// scrape through a pedantic registry, and lookups by name and labels.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metric names, as package metrics documents them, spelled out once
// for the tests on both sides of it.
const (
	Decisions     = "ginlimit_decisions_total"
	Latency       = "ginlimit_decision_seconds"
	NearLimit     = "ginlimit_near_limit_total"
	DenyCacheHits = "ginlimit_deny_cache_hits_total"
	BreakerOpen   = "ginlimit_breaker_open"

	IdentityFailures = "ginlimit_identity_failures_total"
)

// Snapshot is one scrape of a Collector: its metric families by name.
type Snapshot map[string]*dto.MetricFamily

// Scrape gathers c through a pedantic registry, which also checks that
// Collect agrees with Describe.
func Scrape(t testing.TB, c prometheus.Collector) Snapshot {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	s := Snapshot{}
	for _, mf := range mfs {
		s[mf.GetName()] = mf
	}
	return s
}

// labels returns m's labels as a map.
func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// Get returns the value of the series of family name whose labels are the
// name/value pairs kv (a histogram's value is its sample count), and whether
// there is one.
func (s Snapshot) Get(name string, kv ...string) (float64, bool) {
	want := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
	for _, m := range s[name].GetMetric() {
		l := labels(m)
		if len(l) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if l[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// Must is Get for a series that must exist.
func (s Snapshot) Must(t testing.TB, name string, kv ...string) float64 {
	t.Helper()
	v, ok := s.Get(name, kv...)
	if !ok {
		t.Fatalf("no series %s%v", name, kv)
	}
	return v
}

// Pairs returns the distinct (route, rule) label pairs of family name.
func (s Snapshot) Pairs(name string) map[[2]string]bool {
	p := map[[2]string]bool{}
	for _, m := range s[name].GetMetric() {
		l := labels(m)
		p[[2]string{l["route"], l["rule"]}] = true
	}
	return p
}

// Sum returns the sum of every series of counter family name.
func (s Snapshot) Sum(name string) float64 {
	var total float64
	for _, m := range s[name].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	return total
}
