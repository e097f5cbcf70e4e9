package ginlimit

import (
	"net/http"
	"testing"
	"time"
)

// TestAttackBanCountsCachedRefusalsOfAnotherRule: Ban says a refusal by any
// rule of the route is a strike, and that refusals answered from the deny
// cache count as surely as Redis's. On a route with Rules, when the rule
// that refuses is not the one with the Ban, its cached refusals are never
// reported to the ban: a flood refused in process collects one strike per
// MaxStaleness, so Ban(5, ...) does not ban a client that was refused 40
// times (it is banned at once with DenyCache(0), see
// TestBanOnARouteWithRules).
func TestAttackBanCountsCachedRefusalsOfAnotherRule(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	const bound = 300 * time.Millisecond
	in := newInstance(t, c, Key(prefix(t)), MaxStaleness(bound),
		Rule(Name("per-ip"), Type(IP), Window(time.Hour), Limit(100), Ban(5, time.Hour, time.Hour)),
		Rule(Name("route"), Window(time.Hour), Limit(2)))
	hdr := map[string]string{"RemoteAddr": "192.0.2.7:1"}
	cached, redisRefused := 0, 0
	for range 42 { // 2 admitted, 40 refused by "route"
		do(in.e, http.MethodGet, "/claim", hdr)
		if d := in.seen.last().Decision; d.Cached {
			cached++
		} else if !d.Allowed {
			redisRefused++
		}
	}
	if cached == 0 {
		t.Fatal("no refusal came from the deny cache: the test proves nothing")
	}
	// The next Redis call on the key reports the cached refusals.
	time.Sleep(2 * bound)
	do(in.e, http.MethodGet, "/claim", hdr)
	time.Sleep(2 * bound)
	do(in.e, http.MethodGet, "/claim", hdr)
	if d := in.seen.last().Decision; !d.Banned {
		t.Fatalf("after 42 refusals (%d from the deny cache, %d from Redis) and two Redis calls: %+v, want per-ip's ban", cached, redisRefused, d)
	}
}
