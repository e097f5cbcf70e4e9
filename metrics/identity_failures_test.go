package metrics_test

import (
	"testing"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/promtest"
	"github.com/ginlimit/ginlimit/metrics"
)

// unauthorized is the event of a request rule found no identity for.
func unauthorized(route, rule, reason string) ginlimit.Event {
	return ginlimit.Event{Route: route, Rule: rule, Outcome: ginlimit.OutcomeUnauthorized, Decision: ginlimit.Decision{Rule: rule}, Reason: reason}
}

// TestIdentityFailuresByReason: every reason of package identity is
// counted under its own label, a reason it does not know under "other",
// and none of them as a decision.
func TestIdentityFailuresByReason(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	for i, reason := range identity.Reasons() {
		for range i + 1 {
			c.Observe(t.Context(), unauthorized("GET /me", "user", reason))
		}
	}
	c.Observe(t.Context(), unauthorized("GET /me", "user", "made-up"))
	s := promtest.Scrape(t, c)
	for i, reason := range identity.Reasons() {
		want := float64(i + 1)
		if reason == identity.ReasonOther {
			want++ // the made-up reason
		}
		if got := s.Must(t, promtest.IdentityFailures, "route", "GET /me", "rule", "user", "reason", reason); got != want {
			t.Errorf("reason %s: %v, want %v", reason, got, want)
		}
	}
	if _, ok := s.Get(promtest.IdentityFailures, "route", "GET /me", "rule", "user", "reason", "made-up"); ok {
		t.Error("a made-up reason got a series of its own")
	}
	if n := s.Sum(promtest.Decisions); n != 0 {
		t.Errorf("ginlimit_decisions_total sums to %v after identity failures only, want 0", n)
	}
}

// TestIdentityFailuresFoldPastMaxSeries: past the cap, a new (route,
// rule) pair's identity failures are counted under "other", as its
// decisions are.
func TestIdentityFailuresFoldPastMaxSeries(t *testing.T) {
	t.Parallel()
	c := metrics.New(metrics.MaxSeries(1))
	c.Observe(t.Context(), unauthorized("GET /a", "user", identity.ReasonExpired))
	c.Observe(t.Context(), unauthorized("GET /b", "user", identity.ReasonExpired))
	c.Observe(t.Context(), unauthorized("GET ", "user", identity.ReasonMissing))
	s := promtest.Scrape(t, c)
	for _, tc := range []struct{ route, rule, reason string }{
		{"GET /a", "user", identity.ReasonExpired},
		{metrics.Other, metrics.Other, identity.ReasonExpired},
		{metrics.Other, metrics.Other, identity.ReasonMissing},
	} {
		if got := s.Must(t, promtest.IdentityFailures, "route", tc.route, "rule", tc.rule, "reason", tc.reason); got != 1 {
			t.Errorf("%v: %v, want 1", tc, got)
		}
	}
}
