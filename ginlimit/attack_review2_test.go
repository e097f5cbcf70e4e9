package ginlimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestAttackReview2CachedBanStrikesItself: in Redis (lua/penalty.lua) a
// request refused because its identity is banned is no strike for that
// same ban: the penalty's report returns before counting. With the deny
// cache on, a refusal answered from a cached ban is struck on the rule's
// own Ban (pipeline.go decide: every call whose rule has a Ban), so the
// refusals answered in process during the last MaxStaleness of the ban
// are drained into the first Redis call after it ends and ban the
// identity again at once: a client that keeps retrying while banned is
// banned for ever. With DenyCache(0) (every refusal reaches Redis) the
// same client is admitted once the ban is over.
func TestAttackReview2CachedBanStrikesItself(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		deny int
	}{{"deny cache off", 0}, {"deny cache on", DefaultDenyCacheSize}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			const banFor = 3 * time.Second
			in := newInstance(t, srv.Client(), Key(prefix(t)), DenyCache(tc.deny), MaxStaleness(time.Second),
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
