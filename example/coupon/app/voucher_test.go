package app_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// onRedisServer returns the handler of a demo on a redis-server of its own,
// started for the test (cfg.RedisURL is set to it; cfg.JWTSecret defaults to
// testSecret), and a client to look into that Redis.
func onRedisServer(t *testing.T, cfg app.Config) (http.Handler, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	cfg.RedisURL = "redis://" + srv.Addr + "/0"
	if cfg.JWTSecret == nil {
		cfg.JWTSecret = testSecret
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return newApp(t, cfg), rdb
}

// keys returns the keys of rdb that start with prefix.
func keys(t *testing.T, rdb *redis.Client, prefix string) []string {
	t.Helper()
	ks, err := rdb.Keys(t.Context(), prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS %s*: %v", prefix, err)
	}
	return ks
}

// dbSize returns the number of keys in rdb's database.
func dbSize(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	n, err := rdb.DBSize(t.Context()).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return n
}

// TestVoucherClaimPerVoucher is the sequence on a real
// redis-server: alice claims voucher 7 (200), claims it again (429, with a
// Retry-After within the 24 h window), claims voucher 8 (200); bob's claim
// of voucher 7 is his own (200). A request without a valid token gets 401
// and counts nowhere, and an id that is not a canonical positive integer
// gets 400 before the limit, so "07" cannot claim voucher 7 again and no
// malformed id creates a key.
func TestVoucherClaimPerVoucher(t *testing.T) {
	t.Parallel()
	h, rdb := onRedisServer(t, app.Config{})
	alice, bob := login(t, h, "alice"), login(t, h, "bob")
	voucher := func(id, tok string) req { return req{target: "/api/vouchers/" + id + "/claim", token: tok} }
	const (
		unauthorized = `{"code":401,"message":"Authentication required"}`
		badID        = `{"code":400,"message":"The voucher id must be a positive integer"}`
	)

	steps := []step{
		{req: voucher("7", ""), status: 401, body: unauthorized},
		{req: voucher("7", "not-a-jwt"), status: 401, body: unauthorized},
		{req: voucher("7", alice), status: 200, body: `{"code":200,"message":"Voucher claimed","data":{"remaining":0,"user_id":"alice","voucher_id":7}}`},
		{req: voucher("7", alice), status: 429, body: tooMany(app.VoucherClaimMessage)},
		{req: voucher("8", alice), status: 200, body: `{"code":200,"message":"Voucher claimed","data":{"remaining":0,"user_id":"alice","voucher_id":8}}`},
		{req: voucher("7", bob), status: 200, body: `{"code":200,"message":"Voucher claimed","data":{"remaining":0,"user_id":"bob","voucher_id":7}}`},
		{req: voucher("8", alice), status: 429, body: tooMany(app.VoucherClaimMessage)},
		{req: voucher("7", ""), status: 401, body: unauthorized}, // still 401, not 429
	}
	for _, id := range []string{"07", "0", "-7", "+7", "7.0", "abc", strings.Repeat("9", 30)} {
		steps = append(steps, step{req: voucher(id, alice), status: 400, body: badID})
	}
	steps = append(steps, step{req: voucher("9", alice), status: 200}) // a third voucher: still her first claim of it
	ws := run(t, h, steps)

	limited := ws[3]
	ra, err := strconv.Atoi(limited.Header().Get("Retry-After"))
	if err != nil || ra < 1 || ra > int(app.VoucherClaimWindow/time.Second) {
		t.Errorf("429 Retry-After = %q, want 1..%d", limited.Header().Get("Retry-After"), int(app.VoucherClaimWindow/time.Second))
	}
	if got := ws[2].Header().Get("X-RateLimit-Limit"); got != strconv.Itoa(app.VoucherClaimLimit) {
		t.Errorf("X-RateLimit-Limit = %q, want %d", got, app.VoucherClaimLimit)
	}

	// One count per (user, voucher) that was admitted: alice 7, 8, 9 and
	// bob 7; nothing for the refused ids or the requests without a token.
	ks := keys(t, rdb, app.VoucherClaimKey)
	if len(ks) != 4 {
		t.Errorf("voucher claim keys %q, want 4 (alice 7, 8, 9; bob 7)", ks)
	}
	for _, k := range ks {
		if ttl := rdb.PTTL(t.Context(), k).Val(); ttl <= 0 || ttl > app.VoucherClaimWindow+time.Minute {
			t.Errorf("%s: TTL %v, want about the 24 h window", k, ttl)
		}
	}
}

// TestVoucherList: GET /api/vouchers lists the catalog, needs no token and
// creates no key.
func TestVoucherList(t *testing.T) {
	t.Parallel()
	h, rdb := onRedisServer(t, app.Config{})
	const want = `{"code":200,"message":"Voucher list","data":{"vouchers":[` +
		`{"id":7,"merchant":"Coffee Corner","name":"Free pastry with any coffee"},` +
		`{"id":8,"merchant":"Noodle House","name":"20% off any noodle bowl"},` +
		`{"id":9,"merchant":"Book Nook","name":"5 off a book over 30"},` +
		`{"id":10,"merchant":"Coffee Corner","name":"Second coffee half price"}]}}`
	run(t, h, []step{
		{req: req{target: "/api/vouchers"}, status: 200, body: want},
		{req: req{target: "/api/vouchers", token: login(t, h, "alice")}, status: 200, body: want},
	})
	if n := dbSize(t, rdb); n != 0 {
		t.Errorf("DBSIZE after listing the catalog = %d, want 0", n)
	}
}
