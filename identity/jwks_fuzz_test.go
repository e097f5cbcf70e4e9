package identity

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The JWKS parsers read documents from outside: a file an operator
// deploys, or a body from an identity provider over the network. Their
// fuzz targets hold each to one rule: no panic, and either a key set every
// key of which can verify a token, or a clear error that names the source.

// jwksSeeds returns JWKS documents for the fuzz corpora: good sets of
// every key kind, and the ways a set goes wrong (weak or malformed keys,
// duplicate kids, kinds that are skipped, JSON of the wrong shape).
func jwksSeeds(f *testing.F) [][]byte {
	f.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	// RSA moduli of 2048 and 1024 bits: odd numbers of that size are all a
	// public key's checks and its verification look at, and generating
	// real keys takes a fuzzing worker, whose crypto is instrumented, many
	// seconds before its first input.
	n2048 := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 2047), big.NewInt(0x1f3))
	n1024 := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 1023), big.NewInt(0x1f3))
	rsaKey := func(kid string, n *big.Int, e int) string {
		return fmt.Sprintf(`{"kty":"RSA","kid":%q,"use":"sig","alg":"RS256","n":%q,"e":%q}`,
			kid, b64(n.Bytes()), b64(big.NewInt(int64(e)).Bytes()))
	}
	ecKey := func(kid, crv string, c elliptic.Curve) string {
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			f.Fatal(err)
		}
		pt, err := k.PublicKey.Bytes()
		if err != nil {
			f.Fatal(err)
		}
		half := (len(pt) - 1) / 2
		return fmt.Sprintf(`{"kty":"EC","kid":%q,"crv":%q,"x":%q,"y":%q}`, kid, crv, b64(pt[1:1+half]), b64(pt[1+half:]))
	}
	epub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	edKey := fmt.Sprintf(`{"kty":"OKP","kid":"ed","crv":"Ed25519","x":%q}`, b64(epub))
	good := []string{
		rsaKey("rsa", n2048, 65537),
		ecKey("p256", "P-256", elliptic.P256()),
		ecKey("p384", "P-384", elliptic.P384()),
		ecKey("p521", "P-521", elliptic.P521()),
		edKey,
	}
	set := func(keys ...string) []byte { return []byte(`{"keys":[` + strings.Join(keys, ",") + `]}`) }
	seeds := [][]byte{set(good...)}
	for _, k := range good {
		seeds = append(seeds, set(k))
	}
	even := new(big.Int).Lsh(n2048, 1)
	seeds = append(seeds,
		set(rsaKey("weak", n1024, 65537)),
		set(rsaKey("e3", n2048, 3)),
		set(rsaKey("even-n", even, 65537)),
		set(rsaKey("even-e", n2048, 65538)),
		set(good[0], good[0]),
		set(`{"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"}`, edKey),
		set(`{"kty":"oct","kid":"hmac","k":"c2VjcmV0"}`),
		set(`{"kty":"OKP","kid":"x","crv":"X25519","x":"AAAA"}`),
		set(`{"kty":"EC","kid":"k1","crv":"secp256k1","x":"AAAA","y":"AAAA"}`),
		set(`{"kty":"EC","kid":"off","crv":"P-256","x":"`+b64(make([]byte, 32))+`","y":"`+b64(make([]byte, 32))+`"}`),
		set(`{"kty":"RSA","kid":"bad64","n":"!!!","e":"AQAB"}`),
		set(`{"kty":"RSA","kid":1,"n":"AQAB","e":"AQAB"}`),
		set(`{"kty":"RSA","n":"`+b64(n2048.Bytes())+`","e":"AQAB","alg":"ES256"}`),
		[]byte(`{"keys":[]}`), []byte(`{"keys":null}`), []byte(`{}`), []byte(`[]`), []byte(`null`), []byte(``),
		[]byte(`{"keys":[{"kty":"RSA"}]`),
	)
	return seeds
}

// forgedTokens returns a token for every kid of set, with an algorithm of
// its key's family and a signature of the right length that is not valid:
// verifying it runs the key, and must refuse it.
func forgedTokens(set jwks) []string {
	b64 := base64.RawURLEncoding.EncodeToString
	claims := b64(fmt.Appendf(nil, `{"sub":"fuzz","exp":%d}`, time.Now().Add(time.Hour).Unix()))
	var toks []string
	for kid, k := range set {
		var alg string
		var sigLen int
		switch pub := k.key.(type) {
		case *rsa.PublicKey:
			alg, sigLen = "RS256", pub.Size()
		case *ecdsa.PublicKey:
			alg = ecdsaAlg(pub)
			sigLen = 2 * ((pub.Curve.Params().BitSize + 7) / 8)
		case ed25519.PublicKey:
			alg, sigLen = "EdDSA", ed25519.SignatureSize
		}
		if k.alg != "" {
			alg = k.alg
		}
		header, _ := json.Marshal(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"})
		sig := bytes.Repeat([]byte{0x5a}, sigLen)
		toks = append(toks, b64(header)+"."+claims+"."+b64(sig))
	}
	return toks
}

// checkUsable fails t unless set has a key and every key can verify a
// signature: an RSA key that crypto/rsa takes (a wrong signature is
// ErrVerification, nothing else), an EC point on its curve, an Ed25519 key
// of the right size. It then verifies a forged token for each kid through
// j, which must refuse it, as a token signed by someone else.
func checkUsable(t *testing.T, what string, set jwks, j *JWT) {
	t.Helper()
	if len(set) == 0 {
		t.Fatalf("%s: no error and no key", what)
	}
	digest := sha256.Sum256([]byte("fuzz"))
	for kid, k := range set {
		switch pub := k.key.(type) {
		case *rsa.PublicKey:
			if err := checkRSA(pub); err != nil {
				t.Fatalf("%s: kid %q: a key that the set's own check refuses: %v", what, kid, err)
			}
			err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], make([]byte, pub.Size()))
			if !errors.Is(err, rsa.ErrVerification) {
				t.Fatalf("%s: kid %q: crypto/rsa cannot verify with the key: %v", what, kid, err)
			}
		case *ecdsa.PublicKey:
			if _, err := pub.Bytes(); err != nil || ecdsaAlg(pub) == "" {
				t.Fatalf("%s: kid %q: an EC key that is no point of a curve we verify with: %v", what, kid, err)
			}
			if ecdsa.VerifyASN1(pub, digest[:], []byte{0x30, 0}) {
				t.Fatalf("%s: kid %q: an empty signature verified", what, kid)
			}
		case ed25519.PublicKey:
			if len(pub) != ed25519.PublicKeySize {
				t.Fatalf("%s: kid %q: an Ed25519 key of %d bytes", what, kid, len(pub))
			}
		default:
			t.Fatalf("%s: kid %q: a key of type %T", what, kid, k.key)
		}
	}
	for _, tok := range forgedTokens(set) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if id, err := j.Verify(r); err == nil || !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("%s: a forged token was answered %q, %v; want ErrUnauthenticated", what, id, err)
		}
	}
}

// checkClear fails t unless err is a readable error of the named source.
func checkClear(t *testing.T, err error, prefix string) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) || !utf8.ValidString(msg) {
		t.Fatalf("error %q: want valid UTF-8 that starts with %q", msg, prefix)
	}
}

// FuzzJWKS: a JWKS document given as bytes (JWKS), read from a file
// (JWKSFile) or reloaded (ReloadJWKS, from data and from the file) never
// panics; all four agree; each either gives a set every key of which can
// verify, or an error that starts "identity: JWKS" and leaves the set in
// force as it was.
func FuzzJWKS(f *testing.F) {
	seeds := jwksSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	path := filepath.Join(f.TempDir(), "jwks.json")
	base := seeds[0] // a good set, which a refused reload must leave in force
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := parseJWKS(data)
		j, errOpt := NewJWT(JWKS(data))
		if (err == nil) != (errOpt == nil) {
			t.Fatalf("parseJWKS: %v, but NewJWT(JWKS): %v", err, errOpt)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		jf, errFile := NewJWT(JWKSFile(path))
		if (err == nil) != (errFile == nil) {
			t.Fatalf("JWKS: %v, but JWKSFile: %v", err, errFile)
		}
		reloaded, errBase := NewJWT(JWKS(base))
		if errBase != nil {
			t.Fatal(errBase)
		}
		before := reloaded.jwks.Load()
		errReload := reloaded.ReloadJWKS(data)
		if (err == nil) != (errReload == nil) {
			t.Fatalf("JWKS: %v, but ReloadJWKS: %v", err, errReload)
		}
		if err != nil {
			checkClear(t, err, "identity: JWKS")
			checkClear(t, errOpt, "identity: JWKS")
			checkClear(t, errFile, "identity: JWKS")
			if reloaded.jwks.Load() != before {
				t.Fatalf("a refused reload (%v) replaced the set in force", errReload)
			}
			return
		}
		checkUsable(t, "JWKS", set, j)
		if errAgain := jf.ReloadJWKS(nil); errAgain != nil {
			t.Fatalf("ReloadJWKS(nil) of the same file: %v", errAgain)
		}
		// The other three paths hold the same keys (the same parser made
		// them, so checking one set's keys checks theirs).
		for what, other := range map[string]jwks{"JWKSFile": *jf.jwks.Load(), "ReloadJWKS": *reloaded.jwks.Load()} {
			if len(other) != len(set) {
				t.Fatalf("%s gives %d keys, JWKS %d", what, len(other), len(set))
			}
			for kid := range set {
				if _, ok := other[kid]; !ok {
					t.Fatalf("%s has no kid %q, which JWKS has", what, kid)
				}
			}
		}
	})
}

// FuzzRemoteJWKS: a response body from the identity provider (served here
// by an in-process transport, so nothing is dialled) never panics the
// fetch: RemoteJWKS either loads a set every key of which can verify, or
// NewJWT (with RequireStartupFetch) fails with an error that starts
// "identity: RemoteJWKS" and leaves nothing running.
func FuzzRemoteJWKS(f *testing.F) {
	for _, s := range jwksSeeds(f) {
		f.Add(s)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		client := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			return &http.Response{
				StatusCode: http.StatusOK,
				Header:     http.Header{"Content-Type": {"application/json"}},
				Body:       io.NopCloser(bytes.NewReader(body)),
				Request:    r,
			}, nil
		})}
		j, err := NewJWT(RemoteJWKS(context.Background(), "https://idp.example/jwks.json",
			HTTPClient(client), RequireStartupFetch(), JWKSLogger(discard)))
		if err != nil {
			checkClear(t, err, "identity: RemoteJWKS")
			return
		}
		defer j.Close()
		set := j.jwks.Load()
		if set == nil {
			t.Fatal("RequireStartupFetch: NewJWT returned without error and without a set")
		}
		checkUsable(t, "RemoteJWKS", *set, j)
	})
}

// roundTrip is an http.RoundTripper that answers in process.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
