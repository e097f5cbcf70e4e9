// End-to-end tests across the packages: the coupon demo's routes, served by
// httptest, on the embedded miniredis and on a real redis-server.
package ginlimit_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

func init() { gin.SetMode(gin.TestMode) }

var secret = []byte("e2e-secret-of-at-least-thirty-two-bytes!")

// backend is where the demo keeps its counters.
type backend struct {
	name string
	// start returns the demo's Redis URL ("" for embedded miniredis) and, for
	// a real server, a client to inspect it.
	start func(t *testing.T) (string, *redis.Client)
}

var backends = []backend{
	{"miniredis", func(*testing.T) (string, *redis.Client) { return "", nil }},
	{"redis-server", func(t *testing.T) (string, *redis.Client) {
		srv := redistest.Start(t)
		return "redis://" + srv.Addr + "/0", srv.Client()
	}},
}

// demo builds the coupon app for one test.
func demo(t *testing.T, redisURL string, trusted ...string) http.Handler {
	t.Helper()
	a, err := app.New(context.Background(), app.Config{
		RedisURL: redisURL, JWTSecret: secret, TrustedProxies: trusted, DecisionTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a.Handler
}

type call struct {
	method, path, remote, auth, xff, body string
}

func (c call) do(h http.Handler) *httptest.ResponseRecorder {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	method := c.method
	if method == "" {
		method = http.MethodGet
	}
	req := httptest.NewRequest(method, c.path, body)
	if c.remote != "" {
		req.RemoteAddr = c.remote
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if c.xff != "" {
		req.Header.Set("X-Forwarded-For", c.xff)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCouponFlow(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url, _ := b.start(t)
			h := demo(t, url)

			w := call{method: http.MethodPost, path: "/api/login", body: `{"user_id":"alice"}`}.do(h)
			var login struct{ Token string }
			if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &login) != nil || login.Token == "" {
				t.Fatalf("login: %d %s", w.Code, w.Body)
			}
			if w := (call{method: http.MethodPost, path: "/api/login", body: `{"user":`}).do(h); w.Code != 400 || !strings.Contains(w.Body.String(), `"code":400`) {
				t.Fatalf("bad login body: %d %s", w.Code, w.Body)
			}
			claim := call{path: "/api/coupon/claim", auth: "Bearer " + login.Token}
			for i := range app.ClaimLimit {
				// The first claim's entry leaves the window 60 s after its
				// time rounded up to the millisecond: t, rounded up to the
				// second, is 61 while less than that millisecond has passed.
				// The demo hashes identities (HashIdentities), so the
				// header ends with the partition key, ;pk=:<hmac>:.
				w := claim.do(h)
				rl, r := w.Header().Get("RateLimit"), `"coupon:claim";r=`+strconv.Itoa(app.ClaimLimit-1-i)
				rl, pk, _ := strings.Cut(rl, ";pk=:")
				if w.Code != 200 || rl != r+`;t=60` && rl != r+`;t=61` || !strings.HasSuffix(pk, ":") {
					t.Fatalf("claim %d: %d %v %s", i, w.Code, w.Header(), w.Body)
				}
			}
			w = claim.do(h)
			if w.Code != 429 || w.Body.String() != `{"code":429,"message":"You are claiming coupons too often, please try again later"}` {
				t.Fatalf("claim over the limit: %d %s", w.Code, w.Body)
			}
			if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 1 || ra > 61 {
				t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
			}
			if got, _, _ := strings.Cut(w.Header().Get("RateLimit-Policy"), ";pk="); got != `"coupon:claim";q=3;w=60` {
				t.Fatalf("RateLimit-Policy %q", got)
			}
			// Another user has a bucket of their own.
			bob := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()})
			if w := (call{path: "/api/coupon/claim", auth: "Bearer " + bob}).do(h); w.Code != 200 {
				t.Fatalf("bob: %d", w.Code)
			}
			for range 50 {
				if w := (call{path: "/healthz"}).do(h); w.Code != 200 {
					t.Fatalf("healthz: %d", w.Code)
				}
			}
		})
	}
}

// TestBadTokensAre401AndCountedNowhere runs the JWT table against the demo
// on a real Redis, then checks that no counter was written.
func TestBadTokensAre401AndCountedNowhere(t *testing.T) {
	t.Parallel()
	url, rdb := backends[1].start(t)
	h := demo(t, url)

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(time.Hour).Unix()
	b64 := base64.RawURLEncoding.EncodeToString
	for _, tc := range []struct{ name, auth, reason string }{
		{"missing", "", identity.ReasonMissing},
		{"not bearer", "Basic YWxpY2U6c2VjcmV0", identity.ReasonMalformed},
		{"garbage", "Bearer not.a.jwt", identity.ReasonMalformed},
		{"alg none", "Bearer " + b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(`{"sub":"alice","exp":`+strconv.FormatInt(hour, 10)+`}`)) + ".", identity.ReasonAlgorithm},
		{"wrong secret", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!!"), jwt.MapClaims{"sub": "alice", "exp": hour}), identity.ReasonBadSignature},
		{"RS256 not accepted", "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "alice", "exp": hour}), identity.ReasonAlgorithm},
		{"HS512 not accepted", "Bearer " + sign(t, jwt.SigningMethodHS512, secret, jwt.MapClaims{"sub": "alice", "exp": hour}), identity.ReasonAlgorithm},
		{"expired", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()}), identity.ReasonExpired},
		{"not yet valid", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": hour, "nbf": hour - 60}), identity.ReasonNotYetValid},
		{"no exp", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice"}), identity.ReasonClaims},
		{"missing claim", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"exp": hour}), identity.ReasonClaims},
		{"empty claim", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "", "exp": hour}), identity.ReasonClaims},
	} {
		before := identityFailures(t, h)[tc.reason]
		w := call{path: "/api/coupon/claim", auth: tc.auth}.do(h)
		if w.Code != 401 || w.Body.String() != `{"code":401,"message":"Authentication required"}` {
			t.Errorf("%s: %d %s, want 401", tc.name, w.Code, w.Body)
		}
		// Each refusal shows in /metrics under its reason.
		if after := identityFailures(t, h)[tc.reason]; after != before+1 {
			t.Errorf("%s: ginlimit_identity_failures_total{reason=%q} went from %v to %v, want +1", tc.name, tc.reason, before, after)
		}
	}
	keys, err := rdb.Keys(context.Background(), "*").Result()
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == ginlimit.InstancesKey }) // where the limiters count each other
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys %q, %v after only rejected tokens; want none", keys, err)
	}
}

// identityFailures scrapes the demo's /metrics and returns
// ginlimit_identity_failures_total summed by reason.
func identityFailures(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	w := call{path: "/metrics"}.do(h)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", w.Code)
	}
	byReason := map[string]float64{}
	for line := range strings.Lines(w.Body.String()) {
		rest, ok := strings.CutPrefix(line, "ginlimit_identity_failures_total{")
		labels, value, found := strings.Cut(rest, "} ")
		if !ok || !found {
			continue
		}
		_, reason, _ := strings.Cut(labels, `reason="`)
		reason, _, _ = strings.Cut(reason, `"`)
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		byReason[reason] += v
	}
	return byReason
}

// TestAlgorithmConfusion: a verifier holding an RSA public key rejects an
// HS256 token "signed" with that public key as the HMAC secret.
func TestAlgorithmConfusion(t *testing.T) {
	t.Parallel()
	_, rdb := backends[1].start(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := identity.NewJWT(identity.PublicKey(&key.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	gin.SetMode(gin.TestMode)
	e := gin.New()
	e.GET("/x", ginlimit.RateLimit(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.Type(ginlimit.User), ginlimit.UserIdentity(verifier)),
		func(c *gin.Context) { c.Status(200) })
	hour := time.Now().Add(time.Hour).Unix()
	for _, forged := range [][]byte{pemBytes, der} {
		tok := sign(t, jwt.SigningMethodHS256, forged, jwt.MapClaims{"sub": "mallory", "exp": hour})
		if w := (call{path: "/x", auth: "Bearer " + tok}).do(e); w.Code != 401 {
			t.Fatalf("HS256 token keyed with the RSA public key: %d, want 401", w.Code)
		}
	}
	good := sign(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "alice", "exp": hour})
	if w := (call{path: "/x", auth: "Bearer " + good}).do(e); w.Code != 200 {
		t.Fatalf("genuine RS256 token: %d, want 200", w.Code)
	}
	keys, _ := rdb.Keys(context.Background(), "*").Result()
	if len(keys) != 1 || !strings.HasSuffix(keys[0], " user:alice}") {
		t.Fatalf("keys %q, want only alice's", keys)
	}
}

// TestMerchantPerIPAndProxies: the IP route counts per client; a spoofed
// X-Forwarded-For moves nothing unless it comes from a trusted proxy.
func TestMerchantPerIPAndProxies(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url, _ := b.start(t)
			h := demo(t, url, "10.0.0.0/8")
			spoofer := func(i int) call {
				return call{path: "/api/coupon/merchant", remote: "203.0.113.7:4000", xff: "198.51.100." + strconv.Itoa(i)}
			}
			for i := range app.MerchantLimit {
				if w := spoofer(i).do(h); w.Code != 200 {
					t.Fatalf("merchant %d: %d", i, w.Code)
				}
			}
			if w := spoofer(99).do(h); w.Code != 429 || w.Body.String() != `{"code":429,"message":"Too many merchant queries, please try again later"}` {
				t.Fatalf("spoofed XFF from an untrusted peer escaped its bucket: %d %s", w.Code, w.Body)
			}
			// Through the trusted proxy, the forwarded client is the identity.
			viaProxy := call{path: "/api/coupon/merchant", remote: "10.0.0.2:80", xff: "203.0.113.8"}
			if w := viaProxy.do(h); w.Code != 200 {
				t.Fatalf("new client via trusted proxy: %d", w.Code)
			}
			// The proxy forwarding the spoofer's own address hits its full bucket.
			if w := (call{path: "/api/coupon/merchant", remote: "10.0.0.2:80", xff: "203.0.113.7"}).do(h); w.Code != 429 {
				t.Fatalf("spoofer via trusted proxy: %d, want 429", w.Code)
			}
		})
	}
}

// TestVoucherSeckillRouteTemplate: every id shares the route's one bucket,
// exactly, under concurrency.
func TestVoucherSeckillRouteTemplate(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url, rdb := b.start(t)
			h := demo(t, url)
			var ok, limited atomic.Int64
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					w := call{path: "/voucher-order/seckill/" + strconv.Itoa(i+1)}.do(h)
					switch w.Code {
					case 200:
						ok.Add(1)
					case 429:
						limited.Add(1)
					default:
						t.Errorf("id %d: %d %s", i, w.Code, w.Body)
					}
				})
			}
			wg.Wait()
			if ok.Load() != app.VoucherSeckillLimit || limited.Load() != 32-app.VoucherSeckillLimit {
				t.Fatalf("%d allowed and %d limited, want %d and %d", ok.Load(), limited.Load(), app.VoucherSeckillLimit, 32-app.VoucherSeckillLimit)
			}
			if rdb != nil {
				keys, _ := rdb.Keys(context.Background(), "*").Result()
				keys = slices.DeleteFunc(keys, func(k string) bool { return k == ginlimit.InstancesKey })
				if len(keys) != 1 || keys[0] != "voucher:seckill:sl2:{GET /voucher-order/seckill/:id}" {
					t.Fatalf("keys %q", keys)
				}
			}
		})
	}
}

// TestSeckillExactUnderConcurrency: 64 goroutines against the 100-request
// seckill route on a real Redis admit exactly 100.
func TestSeckillExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	url, _ := backends[1].start(t)
	h := demo(t, url)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 4 {
				if w := (call{path: "/api/coupon/seckill"}).do(h); w.Code == 200 {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != app.SeckillLimit {
		t.Fatalf("admitted %d of 256, want exactly %d", ok.Load(), app.SeckillLimit)
	}
}

// TestSeckillOrderInFlight: the demo's GET /api/coupon/seckill/order, two
// instances on one redis-server, 50 simultaneous requests while every
// order being written waits for the test: exactly OrderInFlight (10) are
// written and answered 200, the other 40 get 429 with the route's message;
// once the orders are written, the slots are free again.
func TestSeckillOrderInFlight(t *testing.T) {
	t.Parallel()
	url, _ := backends[1].start(t)
	writing := make(chan struct{}, 100)
	written := make(chan struct{})
	var instances []http.Handler
	for range 2 {
		a, err := app.New(context.Background(), app.Config{
			RedisURL: url, JWTSecret: secret, DecisionTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			WriteOrder: func(context.Context) {
				writing <- struct{}{}
				<-written
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		instances = append(instances, a.Handler)
	}
	const total = 50
	codes := make(chan *httptest.ResponseRecorder, total)
	for i := range total {
		go func() { codes <- (call{path: "/api/coupon/seckill/order"}).do(instances[i%2]) }()
	}
	in, refused := 0, 0
	for deadline := time.After(time.Minute); in+refused < total; {
		select {
		case <-writing:
			in++
		case w := <-codes:
			if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), app.OrderMessage) {
				t.Fatalf("a request without a slot got %d %s", w.Code, w.Body)
			}
			refused++
		case <-deadline:
			t.Fatalf("after a minute: %d writing, %d refused", in, refused)
		}
	}
	close(written)
	if in != app.OrderInFlight || refused != total-app.OrderInFlight {
		t.Fatalf("%d orders written at once and %d refused, want exactly %d and %d", in, refused, app.OrderInFlight, total-app.OrderInFlight)
	}
	for range in {
		if w := <-codes; w.Code != http.StatusOK {
			t.Errorf("an order being written got %d, want 200", w.Code)
		}
	}
	if w := (call{path: "/api/coupon/seckill/order"}).do(instances[0]); w.Code != http.StatusOK {
		t.Errorf("after every order was written: %d, want 200", w.Code)
	}
}
