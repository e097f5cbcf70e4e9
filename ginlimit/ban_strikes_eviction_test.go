package ginlimit

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// eventuallyBanned polls Peek on p, up to within, for ip banned on the
// route's only rule; it reports whether it saw the ban.
func eventuallyBanned(t *testing.T, p *Policy, ip netip.Addr, within time.Duration) (Decision, bool) {
	t.Helper()
	var d Decision
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		var err error
		d, err = p.Peek(context.Background(), Target{Route: "GET /claim", IP: ip})
		if err != nil {
			t.Fatal(err)
		}
		if d.Banned {
			return d, true
		}
		if time.Now().After(deadline) {
			return d, false
		}
	}
}

// refuseFromCache sends requests from hdr to e until it has had want
// refusals, at least cachedWant of them from the deny cache; it returns
// false when the deny cache answered fewer (the machine was too slow for
// the cache's bound: the test then proves nothing).
func refuseFromCache(t *testing.T, e *gin.Engine, seen *recorder, hdr map[string]string, want, cachedWant int) bool {
	t.Helper()
	refused, cached := 0, 0
	for i := 0; refused < want; i++ {
		if i > 100 {
			t.Fatal("never refused")
		}
		w := do(e, http.MethodGet, "/claim?fast=1", hdr)
		if w.Code == http.StatusTooManyRequests {
			refused++
			if seen.last().Decision.Cached {
				cached++
			}
		}
	}
	return cached >= cachedWant
}

// TestCarriedStrikesEvictedFromTheDenyCache: the strikes an instance
// carries for a Ban live in the deny cache's entry for the key, and the
// timer that is to report them within MaxStaleness looks them up there.
// A flood of other clients on the route evicts that entry (a key whose
// cached state has lapsed, or a strike-only entry, is evicted first), and
// the strikes are gone: three refusals under Ban(3, ...) never ban the
// client, on any instance. Here the cache is small (DenyCache(16)) so
// that 300 other clients do it; with the default size it takes about
// DefaultDenyCacheSize distinct clients within MaxStaleness.
func TestCarriedStrikesEvictedFromTheDenyCache(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const staleness = 2 * time.Second
	opts := []Option{Key(prefix(t)), Type(IP), Window(time.Hour), Limit(1),
		Ban(3, time.Hour, time.Hour), maxStaleness(staleness), DenyCache(16)}
	a, _, seenA := banInstance(t, srv, newGate(), opts...)
	_, pb, _ := banInstance(t, srv, newGate(), opts...)
	x := map[string]string{"RemoteAddr": "192.0.2.40:1"}
	if w := do(a, http.MethodGet, "/claim?fast=1", x); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	// One refusal by Redis (a strike in Redis), two from the deny cache
	// (carried): three strikes under Ban(3, ...).
	if !refuseFromCache(t, a, seenA, x, 3, 2) {
		t.Skip("the deny cache answered fewer than two refusals: the machine was too slow for its bound")
	}
	// Other clients, one request each, well within MaxStaleness.
	var wg sync.WaitGroup
	ips := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ips {
				do(a, http.MethodGet, "/claim?fast=1", map[string]string{"RemoteAddr": fmt.Sprintf("10.1.%d.%d:1", i/250, i%250+1)})
			}
		}()
	}
	for i := range 300 {
		ips <- i
	}
	close(ips)
	wg.Wait()
	if d, ok := eventuallyBanned(t, pb, netip.MustParseAddr("192.0.2.40"), 10*staleness); !ok {
		t.Fatalf("three refusals under Ban(3, ...), two of them carried from the deny cache, then a flood of 300 other clients: not banned %v later (%+v): the carried strikes were evicted with their cache entry", 10*staleness, d)
	}
}
