package identity_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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

func signKid(t testing.TB, m jwt.SigningMethod, key any, kid, sub string) string {
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

// hmacSigned builds a token with the given raw header JSON, signed with
// HMAC-SHA256 and secret whatever the header's alg says: for kids that
// MapClaims headers cannot express and for algorithm-confusion attempts.
func hmacSigned(t testing.TB, header string, c jwt.MapClaims, secret string) string {
	t.Helper()
	p, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(p)
	sig, err := jwt.SigningMethodHS256.Sign(signing, []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// jwksHMACSet is the key set next to the HMAC secret in TestJWKSWithHMAC:
// RSA key r1 (testKeys' rsa) and P-256 key e1 (testKeys' p256).
func jwksHMACSet() string {
	k := testKeys()
	return `{"keys":[` + rsaJWK("r1", &k.rsa.PublicKey) + `,` + ecJWK("e1", k.p256) + `]}`
}

// jwksHMACCase is a token, the verifier that judges it, and whether it is
// accepted (as user alice).
type jwksHMACCase struct {
	name string
	j    *identity.JWT
	tok  string
	ok   bool
}

// jwksHMACCases: with both an HMAC secret and a JWKS, j made with
// HMACSecret and JWKS(jwksHMACSet()), withStatic with testKeys' rsa2 as a
// PublicKey as well: which kid selects which key.
func jwksHMACCases(t testing.TB, j, withStatic *identity.JWT) []jwksHMACCase {
	k := testKeys()
	hs := func(header string) string { return hmacSigned(t, header, claims(nil), testSecret) }
	return []jwksHMACCase{
		{"HS256 without kid", j, hs(`{"alg":"HS256","typ":"JWT"}`), true},
		{"HS256 with an unknown kid", j, hs(`{"alg":"HS256","typ":"JWT","kid":"nope"}`), true},
		{"HS256 with kid null", j, hs(`{"alg":"HS256","typ":"JWT","kid":null}`), true},
		{"HS256 with an empty kid", j, hs(`{"alg":"HS256","typ":"JWT","kid":""}`), true},
		{"HS256 with a numeric kid", j, hs(`{"alg":"HS256","typ":"JWT","kid":7}`), true},
		{"HS512 with an unknown kid", j, signKid(t, jwt.SigningMethodHS512, []byte(testSecret), "nope", "alice"), true},
		{"RS256 by kid", j, signKid(t, jwt.SigningMethodRS256, k.rsa, "r1", "alice"), true},
		{"ES256 by kid", j, signKid(t, jwt.SigningMethodES256, k.p256, "e1", "alice"), true},

		// A kid in the set selects that key only: no fallback to the secret.
		{"HS256 with a JWKS kid, signed with the secret", j, hs(`{"alg":"HS256","typ":"JWT","kid":"r1"}`), false},
		{"HS256 with a JWKS EC kid, signed with the secret", j, hs(`{"alg":"HS256","typ":"JWT","kid":"e1"}`), false},
		// No algorithm confusion either way.
		{"HS256 signed with the JWKS key's n", j, hmacSigned(t, `{"alg":"HS256","kid":"r1"}`, claims(nil), string(k.rsa.N.Bytes())), false},
		{"RS256 header, HMAC signature, unknown kid", j, hs(`{"alg":"RS256","typ":"JWT","kid":"nope"}`), false},
		{"RS256 header, HMAC signature, JWKS kid", j, hs(`{"alg":"RS256","typ":"JWT","kid":"r1"}`), false},
		{"RS256 header, HMAC signature, kid null", j, hs(`{"alg":"RS256","typ":"JWT","kid":null}`), false},
		{"ES256 header, HMAC signature, no kid", j, hs(`{"alg":"ES256","typ":"JWT"}`), false},
		{"EdDSA header, HMAC signature, unknown kid", j, hs(`{"alg":"EdDSA","typ":"JWT","kid":"nope"}`), false},
		// Unknown kids still need a valid signature.
		{"HS256 with an unknown kid, wrong secret", j, hmacSigned(t, `{"alg":"HS256","kid":"nope"}`, claims(nil), otherSecret), false},
		{"RS256 with an unknown kid, no static RSA key", j, signKid(t, jwt.SigningMethodRS256, k.rsa, "nope", "alice"), false},
		{"RS256 with kid null, no static RSA key", j, signKid(t, jwt.SigningMethodRS256, k.rsa, "", "alice"), false},

		// A static public key is reached the same way as the secret.
		{"static RSA key, unknown kid", withStatic, signKid(t, jwt.SigningMethodRS256, k.rsa2, "nope", "alice"), true},
		{"static RSA key, JWKS kid", withStatic, signKid(t, jwt.SigningMethodRS256, k.rsa2, "r1", "alice"), false},
		{"JWKS key, unknown kid", withStatic, signKid(t, jwt.SigningMethodRS256, k.rsa, "nope", "alice"), false},
		{"HS256 with an unknown kid next to a static key", withStatic, hs(`{"alg":"HS256","kid":"nope"}`), true},
	}
}

// TestJWKSWithHMAC: with both an HMAC secret and a JWKS, a kid the set has
// selects that JWKS key and nothing else; any other kid (unknown, null, not a
// string) leaves the token to the configured keys of its algorithm family.
func TestJWKSWithHMAC(t *testing.T) {
	t.Parallel()
	k := testKeys()
	set := jwksHMACSet()
	j := mustNewJWT(t, identity.HMACSecret([]byte(testSecret)), identity.JWKS([]byte(set)))
	// withStatic adds a static RSA key (rsa2) next to the JWKS.
	withStatic := mustNewJWT(t, identity.HMACSecret([]byte(testSecret)), identity.PublicKey(&k.rsa2.PublicKey), identity.JWKS([]byte(set)))
	hs := func(header string) string { return hmacSigned(t, header, claims(nil), testSecret) }
	for _, tc := range jwksHMACCases(t, j, withStatic) {
		got, err := tc.j.Verify(bearerRequest("Bearer " + tc.tok))
		switch {
		case tc.ok && (err != nil || got != "alice"):
			t.Errorf("%s: %q, %v; want alice", tc.name, got, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: accepted (%q)", tc.name, got)
		case !tc.ok && !errors.Is(err, identity.ErrUnauthenticated):
			t.Errorf("%s: %v does not wrap ErrUnauthenticated", tc.name, err)
		case err != nil && (strings.Contains(err.Error(), tc.tok) || strings.Contains(err.Error(), "alice")):
			t.Errorf("%s: the error %q shows the token or a claim", tc.name, err)
		}
	}

	// Rotation that brings the kid "nope" into the set takes it away from
	// the secret: the JWKS key is the only one for that kid from then on.
	if err := j.ReloadJWKS([]byte(`{"keys":[` + rsaJWK("nope", &k.rsa.PublicKey) + `]}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := j.Verify(bearerRequest("Bearer " + hs(`{"alg":"HS256","kid":"nope"}`))); err == nil {
		t.Errorf("HS256 with a kid the new set has: accepted (%q)", got)
	}
	if got, err := j.Verify(bearerRequest("Bearer " + hs(`{"alg":"HS256","kid":"r1"}`))); err != nil || got != "alice" {
		t.Errorf("HS256 with a kid rotated out of the set: %q, %v; want alice", got, err)
	}
}

// TestJWKSWeakRSAKeys: RSA keys Go would refuse to verify with, or that are
// too weak, are refused when the set is loaded, by NewJWT and by ReloadJWKS,
// and a refused rotation leaves the old set in force.
func TestJWKSWeakRSAKeys(t *testing.T) {
	t.Parallel()
	k := testKeys()
	short, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	n := k.rsa2.N
	evenN := new(big.Int).Add(n, big.NewInt(1))
	huge := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 16383), big.NewInt(1)) // odd, 16,384 bits
	for _, tc := range []struct {
		name, jwk, want string
	}{
		{"e=1", rsaJWK("weak", &rsa.PublicKey{N: n, E: 1}), "exponent"},
		{"e=2", rsaJWK("weak", &rsa.PublicKey{N: n, E: 2}), "exponent"},
		{"e=3", rsaJWK("weak", &rsa.PublicKey{N: n, E: 3}), "exponent"},
		{"e=65535", rsaJWK("weak", &rsa.PublicKey{N: n, E: 65535}), "exponent"},
		{"e=65538", rsaJWK("weak", &rsa.PublicKey{N: n, E: 65538}), "exponent"},
		{"e=2^31+1", rsaJWK("weak", &rsa.PublicKey{N: n, E: 1<<31 + 1}), "exponent"},
		{"e=0", fmt.Sprintf(`{"kty":"RSA","kid":"weak","n":%q,"e":"AA"}`, b64url(n.Bytes())), "exponent"},
		{"1024-bit modulus", rsaJWK("weak", &short.PublicKey), "1024 bits"},
		{"even modulus", rsaJWK("weak", &rsa.PublicKey{N: evenN, E: 65537}), "even"},
		// A huge modulus costs every token that names its kid: 65,536
		// bits took 0.76 s per verification.
		{"16384-bit modulus", rsaJWK("weak", &rsa.PublicKey{N: huge, E: 65537}), "16384 bits"},
	} {
		set := `{"keys":[` + rsaJWK("good2", &k.rsa2.PublicKey) + `,` + tc.jwk + `]}`
		check := func(how string, err error) {
			t.Helper()
			if err == nil {
				t.Errorf("%s: %s accepted it", tc.name, how)
				return
			}
			if msg := err.Error(); !strings.Contains(msg, `"weak"`) || !strings.Contains(msg, tc.want) {
				t.Errorf("%s: %s: %q names neither the kid nor %q", tc.name, how, msg, tc.want)
			}
		}
		_, err := identity.NewJWT(identity.JWKS([]byte(set)))
		check("NewJWT(JWKS)", err)
		path := filepath.Join(t.TempDir(), "jwks.json")
		if err := os.WriteFile(path, []byte(set), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = identity.NewJWT(identity.JWKSFile(path))
		check("NewJWT(JWKSFile)", err)

		// Rotation: the whole new set is refused, the old one keeps serving.
		good := `{"keys":[` + rsaJWK("good1", &k.rsa.PublicKey) + `]}`
		if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
			t.Fatal(err)
		}
		j := mustNewJWT(t, identity.JWKSFile(path))
		check("ReloadJWKS(data)", j.ReloadJWKS([]byte(set)))
		if err := os.WriteFile(path, []byte(set), 0o600); err != nil {
			t.Fatal(err)
		}
		check("ReloadJWKS(nil)", j.ReloadJWKS(nil))
		if got, err := j.Verify(bearerRequest("Bearer " + signKid(t, jwt.SigningMethodRS256, k.rsa, "good1", "alice"))); err != nil || got != "alice" {
			t.Errorf("%s: after a refused rotation the old key: %q, %v", tc.name, got, err)
		}
		if got, err := j.Verify(bearerRequest("Bearer " + signKid(t, jwt.SigningMethodRS256, k.rsa2, "good2", "bob"))); err == nil {
			t.Errorf("%s: a refused rotation's good key verifies (%q)", tc.name, got)
		}
	}
	// The smallest sound exponent and a larger odd one are fine.
	for _, e := range []int{65537, 1<<31 - 1} {
		set := `{"keys":[` + rsaJWK("ok", &rsa.PublicKey{N: n, E: e}) + `]}`
		if _, err := identity.NewJWT(identity.JWKS([]byte(set))); err != nil {
			t.Errorf("e=%d: %v", e, err)
		}
	}
}
