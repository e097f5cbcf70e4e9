package identity_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

// Test mode keeps gin's debug banner out of the examples' output (and the
// test log) for every test in this package.
func init() { gin.SetMode(gin.TestMode) }

func ExampleNewIP() {
	// The load balancers live in 10.0.0.0/8; nobody else is trusted.
	ip, err := identity.NewIP("10.0.0.0/8")
	if err != nil {
		panic(err)
	}

	// Through the load balancers: the client wrote 198.51.100.23 itself,
	// the first proxy saw 203.0.113.9 and the second 10.0.0.1.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.2:51234"
	r.Header.Set("X-Forwarded-For", "198.51.100.23, 203.0.113.9, 10.0.0.1")
	addr, err := ip.Resolve(r)
	if err != nil {
		panic(err)
	}
	fmt.Println("via proxy:", addr)

	// Directly from the internet: the spoofed header is ignored.
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[::ffff:192.0.2.50]:40000"
	r.Header.Set("X-Forwarded-For", "198.51.100.23")
	addr, err = ip.Resolve(r)
	if err != nil {
		panic(err)
	}
	fmt.Println("direct:", addr)
	// Output:
	// via proxy: 203.0.113.9
	// direct: 192.0.2.50
}

func ExampleNewJWT() {
	secret := []byte("an-example-secret-of-at-least-32-bytes")
	verifier, err := identity.NewJWT(
		identity.HMACSecret(secret),
		identity.Algorithms("HS256"),
		identity.Issuer("https://auth.example.com"),
	)
	if err != nil {
		panic(err)
	}

	// The token an identity provider would issue.
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iss": "https://auth.example.com",
		"sub": "user-42",
		"exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	if err != nil {
		panic(err)
	}

	r := httptest.NewRequest(http.MethodGet, "/coupons", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	id, err := verifier.Verify(r)
	if err != nil {
		panic(err)
	}
	fmt.Println(id)

	// A request without a token is unauthenticated.
	_, err = verifier.Verify(httptest.NewRequest(http.MethodGet, "/coupons", nil))
	fmt.Println(err)
	// Output:
	// user-42
	// identity: unauthenticated: no Authorization header
}

func ExampleFromContext() {
	user := identity.FromContext("user_id")

	r := gin.New()
	// The application's own authentication middleware stores the user id.
	r.Use(func(c *gin.Context) {
		if c.GetHeader("X-Session") == "valid" {
			c.Set("user_id", int64(1001))
		}
		c.Next()
	})
	r.GET("/coupons", func(c *gin.Context) {
		id, err := user.UserID(c)
		if err != nil {
			c.String(http.StatusUnauthorized, "unauthenticated")
			return
		}
		c.String(http.StatusOK, "user %s", id)
	})

	for _, session := range []string{"valid", ""} {
		req := httptest.NewRequest(http.MethodGet, "/coupons", nil)
		req.Header.Set("X-Session", session)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Body.String())
	}
	// Output:
	// 200 user 1001
	// 401 unauthenticated
}

func ExampleRemoteJWKS() {
	// The identity provider: its signing key, and the JWKS it publishes.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	pt, err := key.PublicKey.Bytes() // 0x04 || x || y
	if err != nil {
		panic(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set := fmt.Sprintf(`{"keys":[{"kty":"EC","kid":"2026-01","use":"sig","alg":"ES256","crv":"P-256","x":%q,"y":%q}]}`,
		b64(pt[1:33]), b64(pt[33:]))
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, set)
	}))
	defer idp.Close()

	// The service: the context ends the background refresh, and so does
	// Close. NewJWT waits for the first fetch at most StartupTimeout; if the
	// provider is down it starts with no set (tokens get 401) and keeps
	// trying in the background.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	verifier, err := identity.NewJWT(
		identity.RemoteJWKS(ctx, idp.URL+"/.well-known/jwks.json",
			identity.RefreshInterval(time.Hour),
			identity.UnknownKIDRefetch(5*time.Second),
			identity.StartupTimeout(3*time.Second),
		),
		identity.Issuer("https://auth.example.com"),
	)
	if err != nil {
		panic(err)
	}
	defer verifier.Close()
	fmt.Println("keys loaded:", verifier.JWKSLoaded())

	// A token the provider issued.
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": "https://auth.example.com",
		"sub": "user-42",
		"exp": time.Now().Add(time.Hour).Unix(),
	})
	tok.Header["kid"] = "2026-01"
	signed, err := tok.SignedString(key)
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/coupons", nil)
	r.Header.Set("Authorization", "Bearer "+signed)
	id, err := verifier.Verify(r)
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	// Output:
	// keys loaded: true
	// user-42
}
