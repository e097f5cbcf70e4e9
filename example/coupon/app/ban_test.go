package app_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

// TestMerchantBan: on two demo instances sharing a real redis-server, an IP
// that keeps hitting the merchant route past its 5 per second collects 20
// refusals (on either instance, most of them answered from a deny cache)
// and is banned: both instances answer 429 with the ban's message and a
// Retry-After of at least 50 s. Another IP is not affected.
func TestMerchantBan(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t)
	abuser := req{target: "/api/coupon/merchant", remote: "192.0.2.66:1"}
	for i := range 30 {
		h := a
		if i%2 == 1 {
			h = b
		}
		serve(t, h, abuser)
	}
	// The refusals answered from a deny cache reach Redis with the next call
	// on the key, within the staleness bound: poll for the ban, as long as
	// a loaded machine needs.
	banned := func(h http.Handler) bool {
		w := serve(t, h, abuser)
		if w.Code != http.StatusTooManyRequests || w.Body.String() != tooMany(app.MerchantBanMessage) {
			return false
		}
		if retry, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || retry < 50 || retry > 60 {
			t.Fatalf("the ban's Retry-After is %q, want 50 to 60", w.Header().Get("Retry-After"))
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !banned(a) {
		if time.Now().After(deadline) {
			t.Fatal("no ban 30 s after 25 refusals")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for !banned(b) {
		if time.Now().After(deadline) {
			t.Fatal("instance B does not see the ban within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if w := serve(t, a, req{target: "/api/coupon/merchant", remote: "198.51.100.1:1"}); w.Code != http.StatusOK {
		t.Fatalf("another IP: %d, want 200", w.Code)
	}
}
