package app_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

// provider is an identity provider for the tests: it serves a JWKS over
// httptest, and keys can be added to the set while it runs, or the set
// withheld (503) as when the provider is down.
type provider struct {
	srv     *httptest.Server
	fetches atomic.Int64
	down    atomic.Bool

	mu   sync.Mutex
	keys []map[string]string // the JWKS entries served
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		if p.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.mu.Lock()
		body, err := json.Marshal(map[string]any{"keys": p.keys})
		p.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// url is the address of the set, as JWKS_URL would hold it.
func (p *provider) url() string { return p.srv.URL + "/.well-known/jwks.json" }

var b64 = base64.RawURLEncoding.EncodeToString

// signer is a key of the provider: it publishes its public half and signs
// tokens with its kid.
type signer struct {
	kid    string
	method jwt.SigningMethod
	key    crypto.Signer
}

func newRSASigner(t *testing.T, kid string) signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, method: jwt.SigningMethodRS256, key: k}
}

func newECSigner(t *testing.T, kid string) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, method: jwt.SigningMethodES256, key: k}
}

// publish adds s's public key to the set p serves.
func (p *provider) publish(t *testing.T, s signer) {
	t.Helper()
	var jwk map[string]string
	switch k := s.key.(type) {
	case *rsa.PrivateKey:
		jwk = map[string]string{"kty": "RSA", "kid": s.kid, "use": "sig", "alg": "RS256",
			"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PrivateKey:
		pt, err := k.PublicKey.Bytes() // 0x04 || x || y
		if err != nil {
			t.Fatal(err)
		}
		jwk = map[string]string{"kty": "EC", "kid": s.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
			"x": b64(pt[1:33]), "y": b64(pt[33:])}
	default:
		t.Fatalf("key %T", s.key)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, jwk)
}

// token signs a one-hour token for user with s, naming s's kid.
func (s signer) token(t *testing.T, user string, extra jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	tok := jwt.NewWithClaims(s.method, c)
	tok.Header["kid"] = s.kid
	signed, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// healthz returns the demo's /healthz body.
func healthz(t *testing.T, h http.Handler) map[string]any {
	t.Helper()
	w := serve(t, h, req{target: "/healthz"})
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); w.Code != http.StatusOK || err != nil {
		t.Fatalf("/healthz: status %d, body %s", w.Code, w.Body)
	}
	return out
}

// waitAccepted sends r until it gets 200, and fails the test if that does
// not happen within a generous deadline. The demo promises about 5 s
// (app.JWKSRefetch); the deadline only bounds a broken test on a loaded
// machine.
func waitAccepted(t *testing.T, h http.Handler, r req) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		w := serve(t, h, r)
		switch {
		case w.Code == http.StatusOK:
			return time.Since(start)
		case w.Code != http.StatusUnauthorized:
			t.Fatalf("%s: status %d, body %s; want 401 until the key arrives, then 200", r.target, w.Code, w.Body)
		case time.Now().After(deadline):
			t.Fatalf("%s: still 401 after %v", r.target, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestJWKS, on a real redis-server: with JWKS_URL pointing at a provider
// whose set holds an RSA-2048 key and a P-256 key, RS256 and ES256 tokens
// signed by them are accepted (and counted per their sub, with their plan
// claim honoured), the demo's own HS256 tokens still are, and tokens the
// set cannot verify are not. A key the provider adds after start-up gets
// 401 on its first use, then 200 once the refetch that use asked for has
// brought it.
func TestJWKS(t *testing.T) {
	t.Parallel()
	idp := newProvider(t)
	rs, es := newRSASigner(t, "rsa-2026"), newECSigner(t, "ec-2026")
	idp.publish(t, rs)
	idp.publish(t, es)
	h, _ := onRedisServer(t, app.Config{JWKSURL: idp.url()})

	if got := healthz(t, h); got["status"] != "ok" || got["jwks_loaded"] != true {
		t.Errorf("/healthz = %v, want status ok and jwks_loaded true", got)
	}

	claim := func(tok string) req { return req{target: app.ClaimPath, token: tok} }
	unknown := newRSASigner(t, "rsa-2026") // the kid of a set key, another key
	hs := login(t, h, "hana")
	hsWithKid := func() string { // an HS256 token naming a set kid: refused, never tried with the secret
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "eve", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = rs.kid
		s, err := tok.SignedString(testSecret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}()
	const unauthorized = `{"code":401,"message":"Authentication required"}`
	ok := func(user string, remaining int) string {
		return fmt.Sprintf(`{"code":200,"message":"Coupon claimed","data":{"remaining":%d,"user_id":%q}}`, remaining, user)
	}
	steps := []step{
		{req: claim(rs.token(t, "rita", nil)), status: 200, body: ok("rita", app.ClaimLimit-1)},
		{req: claim(es.token(t, "erin", nil)), status: 200, body: ok("erin", app.ClaimLimit-1)},
		{req: claim(es.token(t, "erin", nil)), status: 200, body: ok("erin", app.ClaimLimit-2)},
		{req: claim(hs), status: 200, body: ok("hana", app.ClaimLimit-1)},
		{req: claim(rs.token(t, "vic", jwt.MapClaims{"plan": app.PlanVIP})), status: 200, body: ok("vic", app.ClaimVIPLimit-1)},
		{req: claim(unknown.token(t, "mallory", nil)), status: 401, body: unauthorized},
		{req: claim(hsWithKid), status: 401, body: unauthorized},
		{req: req{target: "/api/vouchers/7/claim", token: es.token(t, "erin", nil)}, status: 200},
	}
	run(t, h, steps)

	// A key added after start-up: 401 at its first use, which asks for a
	// refetch; accepted once the refetch has brought it.
	added := newECSigner(t, "ec-2027")
	idp.publish(t, added)
	tok := added.token(t, "nora", nil)
	run(t, h, []step{{req: claim(tok), status: 401, body: unauthorized}})
	took := waitAccepted(t, h, claim(tok))
	t.Logf("the added key was accepted %v after its first use (%d fetches in all)", took, idp.fetches.Load())
}

// TestJWKSProviderDown: a provider that is down at start-up does not stop
// the demo: New returns, /healthz says the set is not loaded, the demo's own
// HS256 tokens work and the provider's get 401 (never a shared anonymous
// bucket); once the provider is back, its tokens are accepted.
func TestJWKSProviderDown(t *testing.T) {
	t.Parallel()
	idp := newProvider(t)
	es := newECSigner(t, "ec-2026")
	idp.publish(t, es)
	idp.down.Store(true)
	var logs syncBuffer
	h, _ := onRedisServer(t, app.Config{JWKSURL: idp.url(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	if got := healthz(t, h); got["status"] != "ok" || got["jwks_loaded"] != false {
		t.Errorf("/healthz = %v, want status ok and jwks_loaded false", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "JWKS") {
		t.Errorf("no warning about the JWKS in the log:\n%s", logs.String())
	}
	tok := es.token(t, "erin", nil)
	run(t, h, []step{
		{req: req{target: app.ClaimPath, token: tok}, status: 401},
		{req: req{target: app.ClaimPath, token: login(t, h, "hana")}, status: 200},
	})

	idp.down.Store(false)
	waitAccepted(t, h, req{target: app.ClaimPath, token: tok})
	if got := healthz(t, h); got["jwks_loaded"] != true {
		t.Errorf("/healthz after the provider came back = %v, want jwks_loaded true", got)
	}
}

// TestJWKSCloseStopsTheRefresh: App.Close stops the background refresh;
// no fetch is made after it returns, whatever asks.
func TestJWKSCloseStopsTheRefresh(t *testing.T) {
	t.Parallel()
	idp := newProvider(t)
	idp.down.Store(true) // so the verifier keeps retrying in the background
	a, err := app.New(t.Context(), app.Config{JWKSURL: idp.url(), JWTSecret: testSecret,
		Logger: slog.New(slog.DiscardHandler), DecisionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	after := idp.fetches.Load()
	time.Sleep(3 * time.Second) // the retries would come after 1 s and 2 s more
	if got := idp.fetches.Load(); got != after {
		t.Errorf("%d fetches after Close, want none", got-after)
	}
}

// TestJWKSURLConfig: JWKS_URL is read by ConfigFromEnv; a malformed one is
// an error naming the variable that never repeats the URL's password, and
// one that New refuses (plain http to a remote host) is too.
func TestJWKSURLConfig(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "JWKS_URL" {
				return v
			}
			return ""
		}
	}
	cfg, err := app.ConfigFromEnv(env(" https://idp.example.com/.well-known/jwks.json "))
	if err != nil || cfg.JWKSURL != "https://idp.example.com/.well-known/jwks.json" {
		t.Errorf("ConfigFromEnv: JWKSURL %q, %v", cfg.JWKSURL, err)
	}
	for _, v := range []string{
		"idp.example.com/jwks.json",
		"ftp://idp.example.com/jwks.json",
		"https://",
		"https:///jwks.json",
		"://idp.example.com",
		"https://user:hunter2@[::1/jwks.json",
		"file:///etc/jwks.json",
	} {
		_, err := app.ConfigFromEnv(env(v))
		if err == nil {
			t.Errorf("JWKS_URL=%q: no error", v)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "coupon: JWKS_URL: ") || strings.Contains(msg, "hunter2") {
			t.Errorf("JWKS_URL=%q: error %q, want one naming JWKS_URL without the password", v, msg)
		}
	}

	a, err := app.New(t.Context(), app.Config{JWKSURL: "http://user:hunter2@idp.example.com/jwks.json",
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		a.Close()
		t.Fatal("New accepted a JWKS URL over plain http to a remote host")
	}
	if msg := err.Error(); !strings.Contains(msg, "JWKS_URL") || strings.Contains(msg, "hunter2") {
		t.Errorf("New: error %q, want one naming JWKS_URL without the password", msg)
	}
}
