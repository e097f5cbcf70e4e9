package app_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/ginlimit"
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

// consoleKeys is the prefix of the console's keys: its form key, and its
// beat's traffic and refusals, a few per 5 s whatever the clients send.
const consoleKeys = "{ginlimit:console}:"

// dbSize returns the number of keys in rdb's database but
// ginlimit.InstancesKey, where the limiters count each other, and the
// console's.
func dbSize(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	n, err := rdb.DBSize(t.Context()).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	heartbeat, err := rdb.Exists(t.Context(), ginlimit.InstancesKey).Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	return n - heartbeat - int64(len(keys(t, rdb, consoleKeys)))
}

// TestVoucherClaimPerVoucher is the sequence on a real
// redis-server: alice claims voucher 7 (200), claims it again (429, with a
// Retry-After within the 24 h window, and the millisecond by which the
// sliding log may keep an entry longer, rounded up to the second), claims
// voucher 8 (200); bob's claim
// of voucher 7 is his own (200). A request without a valid token gets 401
// and counts nowhere, and an id that is not a catalog id written the one
// canonical way gets 404 before the limit, so "07" cannot claim voucher 7
// again and no malformed id creates a key.
func TestVoucherClaimPerVoucher(t *testing.T) {
	t.Parallel()
	h, rdb := onRedisServer(t, app.Config{})
	alice, bob := login(t, h, "alice"), login(t, h, "bob")
	voucher := func(id, tok string) req { return req{target: "/api/vouchers/" + id + "/claim", token: tok} }
	const (
		unauthorized = `{"code":401,"message":"Authentication required"}`
		notFound     = `{"code":404,"message":"Voucher not found"}`
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
		steps = append(steps, step{req: voucher(id, alice), status: 404, body: notFound})
	}
	steps = append(steps, step{req: voucher("9", alice), status: 200}) // a third voucher: still her first claim of it
	ws := run(t, h, steps)

	limited := ws[3]
	ra, err := strconv.Atoi(limited.Header().Get("Retry-After"))
	if err != nil || ra < 1 || ra > int(app.VoucherClaimWindow/time.Second)+1 {
		t.Errorf("429 Retry-After = %q, want 1..%d", limited.Header().Get("Retry-After"), int(app.VoucherClaimWindow/time.Second)+1)
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
	// A sliding log's key expires at the end of the quarter of a window
	// (aligned on the clock) its newest entry came in, plus the window.
	for _, k := range ks {
		if ttl := rdb.PTTL(t.Context(), k).Val(); ttl <= app.VoucherClaimWindow-time.Minute || ttl > app.VoucherClaimWindow*5/4+time.Millisecond {
			t.Errorf("%s: TTL %v, want the 24 h window to a quarter more", k, ttl)
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
	// The login's count of the client IP is the one key.
	if n, login := dbSize(t, rdb), len(keys(t, rdb, app.LoginKey)); n != 1 || login != 1 {
		t.Errorf("DBSIZE after a login and listing the catalog = %d (%d of the login), want 1, the login's", n, login)
	}
}

// madeUpVoucherIDs returns 3,000 distinct voucher ids that name no voucher
// of the catalog: small and huge canonical integers (up to and beyond
// 2^63), negative ones, non-canonical spellings of catalog ids ("007",
// "+7", "7.0", "7 "), and text that is no number at all.
func madeUpVoucherIDs(t *testing.T) []string {
	t.Helper()
	ids := []string{
		"0", "00", "007", "07", "+7", "-7", "7.0", "7e0", "0x7", "7 ", " 7", "7\t", "٧",
		"-0", "-1", "-9223372036854775808", "9223372036854775807", "9223372036854775808",
		"18446744073709551615", "18446744073709551616", strings.Repeat("9", 30),
		"abc", "seven", "voucher-7", "null", "%", "{7}", strings.Repeat("a", 300),
	}
	for i := uint64(1); len(ids) < 1000; i++ {
		ids = append(ids, strconv.FormatUint(i, 10)) // the catalog's are dropped below
	}
	for i := uint64(1); len(ids) < 2000; i++ {
		ids = append(ids, strconv.FormatUint(i*0x9E3779B97F4A7C15>>1, 10)) // spread below 2^63
	}
	for i := 1; len(ids) < 2500; i++ {
		ids = append(ids, "-"+strconv.Itoa(i*7919))
	}
	for i := 1; len(ids) < 3000; i++ {
		ids = append(ids, "000"+strconv.Itoa(i), "v"+strconv.Itoa(i))
	}
	real := map[string]bool{}
	for _, v := range app.Vouchers() {
		real[strconv.FormatUint(v.ID, 10)] = true
	}
	seen := map[string]bool{}
	out := ids[:0]
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("made-up voucher id %q is listed twice", id)
		}
		seen[id] = true
		if !real[id] {
			out = append(out, id)
		}
	}
	return out
}

// TestVoucherClaimUnknownIDMakesNoKey: a claim of a voucher that is not in
// the catalog gets 404 before the limit runs, so made-up ids, however many
// and however written, with a token or without, create no Redis key and
// spend nobody's quota; a catalog voucher is still counted and limited,
// one claim per user per 24 h.
func TestVoucherClaimUnknownIDMakesNoKey(t *testing.T) {
	t.Parallel()
	h, rdb := onRedisServer(t, app.Config{})
	alice := login(t, h, "alice")
	const notFound = `{"code":404,"message":"Voucher not found"}`

	before := dbSize(t, rdb)
	ids := madeUpVoucherIDs(t)
	if len(ids) < 2900 {
		t.Fatalf("%d made-up ids, want about 3,000", len(ids))
	}
	statuses := map[int]int{}
	wrong := map[int]string{} // the first wrong answer of each status
	for i, id := range ids {
		tok := alice
		if i%10 == 0 {
			tok = "" // without a token, the id is still what is refused
		}
		w := serve(t, h, req{target: "/api/vouchers/" + url.PathEscape(id) + "/claim", token: tok})
		statuses[w.Code]++
		if w.Code != http.StatusNotFound || w.Body.String() != notFound || w.Header().Get("X-RateLimit-Limit") != "" {
			if _, ok := wrong[w.Code]; !ok {
				wrong[w.Code] = fmt.Sprintf("%q: %d %s (X-RateLimit-Limit %q)", id, w.Code, w.Body, w.Header().Get("X-RateLimit-Limit"))
			}
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d made-up voucher ids got statuses %v, want all %d with %s and no rate limit headers; for example:\n%s",
			len(ids), statuses, http.StatusNotFound, notFound, strings.Join(slices.Sorted(maps.Values(wrong)), "\n"))
	}
	if after := dbSize(t, rdb); after != before {
		t.Errorf("%d made-up voucher ids created %d Redis keys (DBSIZE %d -> %d), want none; for example %q",
			len(ids), after-before, before, after, firstKeys(t, rdb, app.VoucherClaimKey, 3))
	}

	// A catalog voucher is counted as before: alice's first claim of it,
	// untouched by the flood, then 429.
	run(t, h, []step{
		{req: req{target: "/api/vouchers/7/claim", token: alice}, status: 200,
			body: `{"code":200,"message":"Voucher claimed","data":{"remaining":0,"user_id":"alice","voucher_id":7}}`},
		{req: req{target: "/api/vouchers/7/claim", token: alice}, status: 429, body: tooMany(app.VoucherClaimMessage)},
	})
	// Alice's for voucher 7, which the 429 above shows counted; the key
	// holds an HMAC of the user and the id (HashIdentities), not them.
	if ks := keys(t, rdb, app.VoucherClaimKey); len(ks) != 1 || !strings.Contains(ks[0], " user+p.id:") || strings.Contains(ks[0], "alice") {
		t.Errorf("%d voucher claim keys (%q, ...), want only alice's for voucher 7, hashed", len(ks), ks[:min(len(ks), 3)])
	}
}

// firstKeys returns up to n keys of rdb that start with prefix, found with
// SCAN.
func firstKeys(t *testing.T, rdb *redis.Client, prefix string, n int) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(t.Context(), 0, prefix+"*", 100).Iterator()
	for len(out) < n && iter.Next(t.Context()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s*: %v", prefix, err)
	}
	return out
}
