package ginlimit

import (
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestCarriedStrikesFlushedAfterAFailedReport: the timer that reports
// carried strikes within MaxStaleness is armed only by the first strike
// carried on a key. When its report does not get to Redis (here the
// process is saturated, as by a flood on another route, while Redis is
// healthy), the strikes go back to the cache with no timer; every later
// strike on the key finds the count non-zero and arms none either. So
// once the process recovers, the strikes are never reported unless the
// client sends this instance another request: a client that moves to
// another instance is never banned. (A request whose call carried
// strikes and whose client hung up, ErrClientGone, puts them back the
// same way, with no timer.)
func TestCarriedStrikesFlushedAfterAFailedReport(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const staleness = time.Second
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	opts := []Option{Key(prefix(t)), Type(IP), Window(time.Hour), Limit(1),
		Ban(3, time.Hour, time.Hour), maxStaleness(staleness), queueTimeout(20 * time.Millisecond), quiet}
	a, pa, seenA := banInstance(t, srv, newGate(), opts...)
	_, pb, _ := banInstance(t, srv, newGate(), opts...)
	x := map[string]string{"RemoteAddr": "192.0.2.41:1"}
	if w := do(a, http.MethodGet, "/claim?fast=1", x); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	if !refuseFromCache(t, a, seenA, x, 3, 2) {
		t.Skip("the deny cache answered fewer than two refusals: the machine was too slow for its bound")
	}
	// Every decision slot of A taken while its timer reports.
	release := pa.route.Engine.HoldSlots()
	time.Sleep(3 * staleness)
	release()
	// A is healthy again, and so is Redis, all along.
	if d, ok := eventuallyBanned(t, pb, netip.MustParseAddr("192.0.2.41"), 10*staleness); !ok {
		t.Fatalf("three refusals under Ban(3, ...), two carried, a saturation of %v, then %v with A healthy: not banned (%+v): the strikes stay carried with no timer to report them", 3*staleness, 10*staleness, d)
	}
}
