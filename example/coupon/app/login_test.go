package app_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

// TestLoginIsLimitedPerIP is the flood on a real redis-server:
// 500 made-up logins from one address, each token then claiming every
// voucher of the catalog and a coupon. Only LoginLimit logins get a token,
// so the keys the flood leaves are bounded: the address's login count,
// and a claim count and a voucher count per voucher for each of the
// LoginLimit users. Another address still logs in, and a body that is not
// a login is refused before the limit, spending none of it.
func TestLoginIsLimitedPerIP(t *testing.T) {
	t.Parallel()
	h, rdb := onRedisServer(t, app.Config{})
	const flood = 500
	const from = "203.0.113.9:4242"
	vouchers := app.Vouchers()
	tokens := 0
	statuses := map[int]int{}
	var refused *http.Response
	for i := range flood {
		w := serve(t, h, req{method: http.MethodPost, target: "/api/login", remote: from, body: `{"user_id":"made-up-` + strconv.Itoa(i) + `"}`})
		statuses[w.Code]++
		if w.Code != http.StatusOK {
			if refused == nil {
				refused = w.Result()
			}
			continue
		}
		tokens++
		var out struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		tok := out.Token
		for _, v := range vouchers {
			serve(t, h, req{target: "/api/vouchers/" + strconv.FormatUint(v.ID, 10) + "/claim", token: tok, remote: from})
		}
		serve(t, h, req{target: app.ClaimPath, token: tok, remote: from})
	}
	n := dbSize(t, rdb)
	bound := int64(1 + app.LoginLimit*(len(vouchers)+1))
	t.Logf("%d logins from one address: statuses %v, %d tokens, %d keys (%d voucher keys); bound %d keys",
		flood, statuses, tokens, n, len(keys(t, rdb, app.VoucherClaimKey)), bound)
	if tokens != app.LoginLimit || statuses[http.StatusTooManyRequests] != flood-app.LoginLimit {
		t.Errorf("%d tokens and %d refusals, want %d and %d", tokens, statuses[http.StatusTooManyRequests], app.LoginLimit, flood-app.LoginLimit)
	}
	if n > bound {
		t.Errorf("the flood left %d keys, want at most %d", n, bound)
	}
	if refused == nil || refused.Header.Get("Retry-After") == "" {
		t.Errorf("the refused login has no Retry-After")
	}
	login(t, h, "alice") // from another address (serve's default)
	w := serve(t, h, req{method: http.MethodPost, target: "/api/login", remote: from, body: `{"user_id":""}`})
	if w.Code != http.StatusBadRequest {
		t.Errorf("a bad body from the limited address: %d, want 400 (checked before the limit)", w.Code)
	}
}

// TestHeadersCarryThePartitionKey on a real redis-server: the demo hashes
// identities (IdentitySecret), so a limited route's RateLimit-Policy
// carries the draft's pk parameter, the same on two instances with the
// same secret and another for another client, and the client's IP is in
// no key.
func TestHeadersCarryThePartitionKey(t *testing.T) {
	t.Parallel()
	_, a, b := twoInstances(t)
	pk := func(h http.Handler, remote string) string {
		w := serve(t, h, req{target: "/api/coupon/merchant", remote: remote})
		policy := w.Header().Get("RateLimit-Policy")
		_, v, ok := strings.Cut(policy, ";pk=:")
		if w.Code != http.StatusOK || !ok {
			t.Fatalf("%s: %d, RateLimit-Policy %q, want a pk parameter", remote, w.Code, policy)
		}
		return v
	}
	alice, again, other := pk(a, "192.0.2.1:1"), pk(b, "192.0.2.1:2"), pk(a, "198.51.100.7:1")
	t.Logf("pk %s", alice)
	if alice != again || alice == other {
		t.Errorf("pk %q on A, %q on B for the same IP, %q for another; want the first two equal, the third not", alice, again, other)
	}
}
