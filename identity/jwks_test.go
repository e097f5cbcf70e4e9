package identity_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) string {
	return fmt.Sprintf(`{"kty":"RSA","kid":%q,"use":"sig","alg":"RS256","n":%q,"e":%q}`,
		kid, b64url(k.N.Bytes()), b64url(big.NewInt(int64(k.E)).Bytes()))
}

func ecJWK(kid string, k *ecdsa.PrivateKey) string {
	pt, err := k.PublicKey.Bytes()
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf(`{"kty":"EC","kid":%q,"crv":"P-256","x":%q,"y":%q}`, kid, b64url(pt[1:33]), b64url(pt[33:]))
}

func edJWK(kid string, k ed25519.PublicKey) string {
	return fmt.Sprintf(`{"kty":"OKP","kid":%q,"crv":"Ed25519","x":%q}`, kid, b64url(k))
}

func signKid(t *testing.T, m jwt.SigningMethod, key any, kid, sub string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWKS(t *testing.T) {
	t.Parallel()
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	epub, epriv, _ := ed25519.GenerateKey(rand.Reader)
	set1 := `{"keys":[` + rsaJWK("r1", &rk.PublicKey) + `,` + ecJWK("e1", ek) + `,` + edJWK("d1", epub) +
		`,{"kty":"oct","kid":"h","k":"c2VjcmV0"},{"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"}]}`
	dir := t.TempDir()
	path := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(path, []byte(set1), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := identity.NewJWT(identity.JWKSFile(path))
	if err != nil {
		t.Fatal(err)
	}
	verify := func(tok string) (string, error) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return j.Verify(r)
	}
	for _, tc := range []struct {
		name, tok, want string
	}{
		{"rsa", signKid(t, jwt.SigningMethodRS256, rk, "r1", "alice"), "alice"},
		{"ec", signKid(t, jwt.SigningMethodES256, ek, "e1", "bob"), "bob"},
		{"ed25519", signKid(t, jwt.SigningMethodEdDSA, epriv, "d1", "carol"), "carol"},
		{"unknown kid", signKid(t, jwt.SigningMethodRS256, rk, "nope", "x"), ""},
		{"alg other than the key's", signKid(t, jwt.SigningMethodRS512, rk, "r1", "x"), ""},
		{"RS/HS confusion by kid", signKid(t, jwt.SigningMethodHS256, []byte(rsaJWK("r1", &rk.PublicKey)), "r1", "x"), ""},
		{"no kid", signKid(t, jwt.SigningMethodRS256, rk, "", "x"), ""},
	} {
		got, err := verify(tc.tok)
		if tc.want == "" {
			if err == nil || !errors.Is(err, identity.ErrUnauthenticated) {
				t.Errorf("%s: accepted (%q)", tc.name, got)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}

	// Rotation: a new set without r1 but with r2.
	rk2, _ := rsa.GenerateKey(rand.Reader, 2048)
	old := signKid(t, jwt.SigningMethodRS256, rk, "r1", "alice")
	if err := os.WriteFile(path, []byte(`{"keys":[`+rsaJWK("r2", &rk2.PublicKey)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := j.ReloadJWKS(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(old); err == nil {
		t.Error("a token of a rotated-out key still verifies")
	}
	if got, err := verify(signKid(t, jwt.SigningMethodRS256, rk2, "r2", "dave")); err != nil || got != "dave" {
		t.Errorf("the new key: %q, %v", got, err)
	}
	// A bad set is refused and the current one stays.
	if err := j.ReloadJWKS([]byte(`{"keys":[]}`)); err == nil {
		t.Error("an empty set was accepted")
	}
	if got, err := verify(signKid(t, jwt.SigningMethodRS256, rk2, "r2", "erin")); err != nil || got != "erin" {
		t.Errorf("after a refused reload: %q, %v", got, err)
	}
	for _, bad := range []string{`nope`, `{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`, `{"keys":[{"kty":"EC","crv":"P-999"}]}`} {
		if _, err := identity.NewJWT(identity.JWKS([]byte(bad))); err == nil {
			t.Errorf("JWKS %s accepted", bad)
		}
	}
}
