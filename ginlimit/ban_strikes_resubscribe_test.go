package ginlimit

import (
	"context"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestCarriedStrikesSurviveALostSubscription: when the subscription to
// ResetChannel drops (a network blip, a proxy's idle timeout, Redis's
// pubsub output-buffer limit) while Redis stays healthy, the hub clears
// every deny cache, since a reset may have gone by. The strikes carried
// for a Ban live in those entries, so they are dropped too, and the timer
// that is to report them finds nothing: they are no quota state that a
// missed reset could have made wrong, yet they are lost.
func TestCarriedStrikesSurviveALostSubscription(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const staleness = 2 * time.Second
	opts := []Option{Key(prefix(t)), Type(IP), Window(time.Hour), Limit(1),
		Ban(3, time.Hour, time.Hour), maxStaleness(staleness)}
	a, _, seenA := banInstance(t, srv, newGate(), opts...)
	_, pb, _ := banInstance(t, srv, newGate(), opts...)
	x := map[string]string{"RemoteAddr": "192.0.2.42:1"}
	if w := do(a, http.MethodGet, "/claim?fast=1", x); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	if !refuseFromCache(t, a, seenA, x, 3, 2) {
		t.Skip("the deny cache answered fewer than two refusals: the machine was too slow for its bound")
	}
	if err := srv.Client().Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if d, ok := eventuallyBanned(t, pb, netip.MustParseAddr("192.0.2.42"), 10*staleness); !ok {
		t.Fatalf("three refusals under Ban(3, ...), two carried, then the reset subscription dropped (Redis healthy): not banned %v later (%+v): the carried strikes went with the cleared deny cache", 10*staleness, d)
	}
}
