package ginlimit

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/identity"
)

// unauthorizedSecret is the HMAC secret of the verifiers here.
var unauthorizedSecret = []byte("unauthorized-test-secret-of-32-bytes!")

// hs256 signs claims for sub with secret, expiring at exp.
func hs256(t *testing.T, secret []byte, sub string, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// unauthorizedRoute serves GET /x limited per the user of a JWT, with
// observe as observer and a debug logger writing to logs.
func unauthorizedRoute(t *testing.T, dim Dimension, logs *syncBuffer, observe func(context.Context, Event)) *gin.Engine {
	t.Helper()
	_, c := newMini(t)
	jwtUser, err := identity.NewJWT(identity.HMACSecret(unauthorizedSecret))
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Name("claims"), Limit(100), Type(dim), UserIdentity(jwtUser),
		Observe(observe), withLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))), ok)
	return e
}

// TestUnauthorizedObservedAndLogged: a request a User rule finds no valid
// identity for is answered 401, reported to observers as
// OutcomeUnauthorized with its reason, and logged at debug level at most
// once per reason per decide.LogEvery, without the token or the user id.
func TestUnauthorizedObservedAndLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var mu sync.Mutex
	var events []Event
	e := unauthorizedRoute(t, User, &logs, func(_ context.Context, ev Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	wrongSecret := hs256(t, []byte("a-different-secret-of-thirty-two-bytes"), "alice-7f3e", time.Now().Add(time.Hour))
	expired := hs256(t, unauthorizedSecret, "alice-7f3e", time.Now().Add(-time.Hour))
	sent := map[string]int{}
	start := time.Now()
	for _, tc := range []struct {
		auth, reason string
		times        int
	}{
		{"Bearer " + wrongSecret, identity.ReasonBadSignature, 20},
		{"", identity.ReasonMissing, 3},
		{"Bearer " + expired, identity.ReasonExpired, 2},
	} {
		for range tc.times {
			hdr := map[string]string{}
			if tc.auth != "" {
				hdr["Authorization"] = tc.auth
			}
			if w := do(e, http.MethodGet, "/x", hdr); w.Code != http.StatusUnauthorized {
				t.Fatalf("%s: %d, want 401", tc.reason, w.Code)
			}
		}
		sent[tc.reason] = tc.times
	}
	elapsed := time.Since(start)

	mu.Lock()
	got := map[string]int{}
	for _, ev := range events {
		if ev.Outcome != OutcomeUnauthorized || ev.Route != "GET /x" || ev.Rule != "claims" || ev.Decision.Rule != "claims" || ev.Decision.Allowed {
			t.Errorf("event %+v, want an unauthorized one of GET /x, rule claims", ev)
		}
		got[ev.Reason]++
	}
	mu.Unlock()
	for reason, n := range sent {
		if got[reason] != n {
			t.Errorf("%d events with reason %q, want %d (all: %v)", got[reason], reason, n, got)
		}
	}

	text := logs.String()
	// One line per reason per decide.LogEvery: the run may take longer than
	// decide.LogEvery on a loaded machine, which allows one more line each time.
	most := 1 + int(elapsed/decide.LogEvery)
	for reason := range sent {
		n := strings.Count(text, `msg="ginlimit: no valid identity for the request; answering 401" rule=claims route=/x reason=`+reason+"\n")
		if n < 1 || n > most {
			t.Errorf("%d debug lines for reason %s, want 1 to %d:\n%s", n, reason, most, text)
		}
	}
	for _, secret := range []string{"alice-7f3e", wrongSecret, expired, strings.Split(wrongSecret, ".")[2]} {
		if strings.Contains(text, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, text)
		}
	}
}

// TestUnauthorizedUserOrIP: a UserOrIP rule counts a request without a
// valid identity per IP; it is no failure, and no observer hears of one.
func TestUnauthorizedUserOrIP(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var mu sync.Mutex
	var outcomes []Outcome
	e := unauthorizedRoute(t, UserOrIP, &logs, func(_ context.Context, ev Event) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, ev.Outcome)
	})
	if w := do(e, http.MethodGet, "/x", map[string]string{"Authorization": "Bearer x.y.z"}); w.Code != http.StatusOK {
		t.Fatalf("%d, want 200", w.Code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 1 || outcomes[0] != OutcomeAllowed {
		t.Fatalf("outcomes %v, want [allowed]", outcomes)
	}
	if strings.Contains(logs.String(), "no valid identity") {
		t.Fatalf("an anonymous request was logged as a failure:\n%s", logs.String())
	}
}
