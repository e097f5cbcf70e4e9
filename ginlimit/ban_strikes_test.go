package ginlimit

import (
	"context"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// banInstance is one application instance serving GET /claim with opts,
// on its own client of srv.
func banInstance(t *testing.T, srv *redistest.Server, g *gate, opts ...Option) (*gin.Engine, *Policy, *recorder) {
	t.Helper()
	seen := &recorder{}
	l := slotLimiter(t, redis.NewClient(&redis.Options{Addr: srv.Addr}), Observe(seen.Observe))
	p, err := l.Policy(opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/claim", p.route.Serve, g.handle)
	return e, p, seen
}

// waitBanned waits, up to slotWait, until Peek on p shows ip banned on the
// rule named rule: a report on its way is not held to a deadline.
func waitBanned(t *testing.T, p *Policy, rule string, ip netip.Addr) {
	t.Helper()
	for deadline := time.Now().Add(slotWait); ; time.Sleep(20 * time.Millisecond) {
		d, err := p.Peek(context.Background(), Target{Route: "GET /claim", Rule: rule, IP: ip})
		if err != nil {
			t.Fatal(err)
		}
		if d.Banned {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not banned in Redis after %v: %+v", slotWait, d)
		}
	}
}

// TestBanCountsInFlightRefusals: a refusal by the route's in-flight rule
// is a strike for the route's Ban, as a rate refusal is: three in-flight
// 429s under Ban(3, ...) ban the client, on this instance and on another.
// Before, in-flight refusals were no strikes: 20 of them did not ban.
func TestBanCountsInFlightRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pre := prefix(t)
	opts := []Option{Key(pre),
		Rule(Name("rate"), Type(IP), Window(time.Hour), Limit(100), Ban(3, time.Hour, time.Hour)),
		Rule(Name("slots"), InFlight(1, time.Minute))}
	ga, gb := newGate(), newGate()
	defer ga.open()
	defer gb.open()
	a, _, seenA := banInstance(t, srv, ga, opts...)
	b, pb, seenB := banInstance(t, srv, gb, opts...)
	hdr := map[string]string{"RemoteAddr": "192.0.2.20:1"}

	done := make(chan int, 1)
	go func() { done <- do(a, http.MethodGet, "/claim", map[string]string{"RemoteAddr": "192.0.2.21:1"}).Code }()
	select {
	case <-ga.entered:
	case <-time.After(slotWait):
		t.Fatal("the holder never got its slot")
	}
	for i := range 3 {
		if w := do(a, http.MethodGet, "/claim?fast=1", hdr); w.Code != http.StatusTooManyRequests {
			t.Fatalf("request %d while the slot is held: %d, want 429", i, w.Code)
		}
		if d := seenA.last().Decision; d.Rule != "slots" && !d.Banned {
			t.Fatalf("request %d was refused by %q, want the in-flight rule", i, d.Rule)
		}
	}
	ga.open()
	<-done
	if w := do(a, http.MethodGet, "/claim?fast=1", hdr); w.Code != http.StatusTooManyRequests || !seenA.last().Decision.Banned {
		t.Fatalf("after 3 in-flight refusals under Ban(3, ...), on the same instance: %d %+v, want banned", w.Code, seenA.last().Decision)
	}
	if w := do(b, http.MethodGet, "/claim?fast=1", hdr); w.Code != http.StatusTooManyRequests || !seenB.last().Decision.Banned {
		t.Fatalf("after 3 in-flight refusals under Ban(3, ...), on another instance: %d %+v, want banned", w.Code, seenB.last().Decision)
	}
	waitBanned(t, pb, "rate", netip.MustParseAddr("192.0.2.20"))
}

// TestBanOnTheVeryNextRequest: the demo's merchant route, 5 per second per
// IP with Ban(20, 10s, ...): 25 refusals in a burst, most answered from the
// deny cache (their strikes carried in process), a pause longer than
// MaxStaleness, then a request. The carried strikes count before that
// request is judged, so it is the first the ban refuses, on this instance;
// and they reach Redis within MaxStaleness of the burst without any
// further request, so another instance refuses the client too. Before, the
// request after the pause was admitted (the script judged it before
// counting the strikes it carried), and only the one after it was banned.
func TestBanOnTheVeryNextRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const staleness = 200 * time.Millisecond
	opts := []Option{Key(prefix(t)), Type(IP), Window(time.Second), Limit(5),
		Ban(20, 10*time.Second, time.Minute), maxStaleness(staleness)}
	a, _, seenA := banInstance(t, srv, newGate(), opts...)
	b, pb, seenB := banInstance(t, srv, newGate(), opts...)
	hdr := map[string]string{"RemoteAddr": "192.0.2.30:1"}
	refused, cached := 0, 0
	for refused < 25 {
		if w := do(a, http.MethodGet, "/claim?fast=1", hdr); w.Code == http.StatusTooManyRequests {
			refused++
			if seenA.last().Decision.Cached {
				cached++
			}
		}
	}
	if cached == 0 {
		t.Fatal("no refusal came from the deny cache: the test proves nothing about carried strikes")
	}
	time.Sleep(6 * staleness)
	w := do(a, http.MethodGet, "/claim?fast=1", hdr)
	if d := seenA.last().Decision; w.Code != http.StatusTooManyRequests || !d.Banned {
		t.Fatalf("the request after 25 refusals (%d from the deny cache) and a pause: %d %+v, want banned", cached, w.Code, d)
	}
	waitBanned(t, pb, "", netip.MustParseAddr("192.0.2.30"))
	w = do(b, http.MethodGet, "/claim?fast=1", hdr)
	if d := seenB.last().Decision; w.Code != http.StatusTooManyRequests || !d.Banned {
		t.Fatalf("another instance, after the ban: %d %+v, want banned", w.Code, d)
	}
}

// TestCachedBanIsNoStrikeOnItself: in Redis (lua/penalty.lua) a
// request refused because its identity is banned is no strike for that
// same ban: the penalty's report returns before counting. A refusal
// answered from a cached ban must be no strike either: struck on the
// rule's own Ban, the refusals answered in process during the last
// MaxStaleness of the ban would be drained into the first Redis call after
// it ends and ban the identity again at once, so a client that keeps
// retrying while banned would be banned for ever. The test runs with the
// deny cache on and with DenyCache(0) (every refusal reaches Redis): in
// both, the client is admitted once the ban is over.
func TestCachedBanIsNoStrikeOnItself(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		deny int
	}{{"deny cache off", 0}, {"deny cache on", DefaultDenyCacheSize}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			const banFor = 3 * time.Second
			in := newInstance(t, srv.Client(), Key(prefix(t)), DenyCache(tc.deny), maxStaleness(time.Second),
				Type(IP), Window(time.Second), Limit(2), Ban(3, time.Minute, banFor))
			hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
			var banned time.Time
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("never banned")
				}
				do(in.e, http.MethodGet, "/claim", hdr)
				if in.seen.last().Decision.Banned {
					banned = time.Now()
					break
				}
			}
			// The client keeps retrying while banned...
			for time.Since(banned) < banFor-200*time.Millisecond {
				if w := do(in.e, http.MethodGet, "/claim", hdr); w.Code != http.StatusTooManyRequests {
					t.Fatalf("while banned: %d, want 429", w.Code)
				}
				time.Sleep(20 * time.Millisecond)
			}
			// ...and stops; once the ban and the rule's window are over, it
			// gets its 2 per second again.
			time.Sleep(time.Until(banned.Add(banFor + 700*time.Millisecond)))
			for i := range 2 {
				w := do(in.e, http.MethodGet, "/claim", hdr)
				if d := in.seen.last().Decision; w.Code != http.StatusOK {
					t.Fatalf("request %d after the ban ended: %d (banned %v, cached %v), want 200", i+1, w.Code, d.Banned, d.Cached)
				}
			}
		})
	}
}
