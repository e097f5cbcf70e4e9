package identity_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

// An error that repeats a run of minLeak bytes of a claim, or
// minTokenLeak bytes of a token, leaks it; a shorter run may be part of an
// error's fixed wording ("identity", an algorithm's name).
const (
	minLeak      = 8
	minTokenLeak = 16
)

// refBearer is RFC 6750's bearer token of an Authorization value as the
// package documents it: the scheme "Bearer" in any case, one space, and a
// token of 1 to 8 KiB once blanks around it are trimmed.
func refBearer(auth string) (string, bool) {
	scheme, tok, ok := strings.Cut(auth, " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "bearer") && tok != "" && len(tok) <= maxTokenLen
}

// tokenParts decodes a compact JWT's header and claims as golang-jwt
// does: three segments, base64url without padding, the header one JSON
// object (nil if it is not), the claims as decodeClaims reads them. It
// also returns the header's JSON text.
func tokenParts(tok string) (header, claims map[string]any, headerText string) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, nil, ""
	}
	h, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err == nil && json.Unmarshal(h, &header) != nil {
		header = nil
	}
	if c, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil {
		claims = decodeClaims(c)
	}
	return header, claims, string(h)
}

// decodeClaims reads claims as golang-jwt does with JSON numbers: the
// first JSON value of the text, numbers kept as json.Number; nil if that
// is not an object.
func decodeClaims(b []byte) map[string]any {
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&claims) != nil {
		return nil
	}
	return claims
}

// integerID matches an integer user id claim.
var integerID = regexp.MustCompile(`^-?[0-9]{1,20}$`)

// refUserID is the documented user id of a claim value: a string, or an
// integer written out, of 1 to MaxUserIDLen bytes.
func refUserID(v any) (string, bool) {
	var id string
	switch v := v.(type) {
	case string:
		id = v
	case json.Number:
		if !integerID.MatchString(string(v)) {
			return "", false
		}
		id = string(v)
	default:
		return "", false
	}
	return id, id != "" && len(id) <= identity.MaxUserIDLen
}

// claimTexts returns the claims' top-level strings and numbers of at
// least minLeak bytes, which an error must not repeat, but those the
// token's header also holds: an error may name what is wrong with the
// header (its alg, say), which is no identity.
func claimTexts(claims map[string]any, headerText string) []string {
	var out []string
	for _, v := range claims {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case json.Number:
			s = string(v)
		default:
			continue
		}
		if len(s) >= minLeak && !strings.Contains(headerText, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkVerdict: a User's answer is an id and no error, or no id and an
// error wrapping ErrUnauthenticated, which repeats neither the token nor a
// claim, and which identity.Reason classifies.
func checkVerdict(t *testing.T, what, tok string, id string, err error) {
	t.Helper()
	switch {
	case err == nil && id == "":
		t.Fatalf("%s: no id and no error", what)
	case err != nil && (id != "" || !errors.Is(err, identity.ErrUnauthenticated)):
		t.Fatalf("%s = %q, %v; want no id and an error wrapping ErrUnauthenticated", what, id, err)
	case err != nil:
		// Every refusal of identity's own verifier has a precise reason.
		if r := identity.Reason(err); r == identity.ReasonOther || !slices.Contains(identity.Reasons(), r) {
			t.Fatalf("%s: Reason(%v) = %q, want one of %v other than %q", what, err, r, identity.Reasons(), identity.ReasonOther)
		}
		if len(tok) >= minTokenLeak {
			if _, ok := leakedText(err.Error(), "", minTokenLeak, tok); ok {
				t.Fatalf("%s: the error %q repeats the token %.100q", what, err, tok)
			}
		}
		_, claims, headerText := tokenParts(tok)
		if v, ok := leakedText(err.Error(), "", minLeak, claimTexts(claims, headerText)...); ok {
			t.Fatalf("%s: the error %q repeats the claim %.100q", what, err, v)
		}
	}
}

// fuzzVerifiers are the JWT verifiers the fuzz targets judge tokens with:
// HMAC only, HMAC next to a JWKS (kids r1 and e1), every kind of key.
type fuzzVerifiers struct {
	hmac, jwks, every *identity.JWT
}

func newFuzzVerifiers(f *testing.F) fuzzVerifiers {
	k := testKeys()
	secret := identity.HMACSecret([]byte(testSecret))
	return fuzzVerifiers{
		hmac: mustNewJWT(f, secret),
		jwks: mustNewJWT(f, secret, identity.JWKS([]byte(jwksHMACSet()))),
		every: mustNewJWT(f, secret, identity.PublicKey(&k.rsa.PublicKey), identity.PublicKey(&k.p256.PublicKey),
			identity.PublicKey(k.edPub())),
	}
}

// tableTokens returns the Authorization values of the JWT tests' tables:
// tokens refused and accepted, and those of the JWKS-next-to-HMAC kids.
func tableTokens(f *testing.F, v fuzzVerifiers) []string {
	var auths []string
	for _, tc := range jwtRejectCases(f) {
		auths = append(auths, tc.auth)
	}
	for _, tc := range jwtAcceptCases(f) {
		auths = append(auths, tc.auth)
	}
	for _, tc := range jwksHMACCases(f, v.jwks, v.every) {
		auths = append(auths, "Bearer "+tc.tok)
	}
	return auths
}

var hmacAlgs = []string{"HS256", "HS384", "HS512"}

// FuzzBearerToken: the Authorization header, verified by a verifier with
// an HMAC secret, one with a JWKS as well, and one with every kind of key.
//
//   - The answer is an id, or an error wrapping ErrUnauthenticated that
//     repeats neither the token nor any claim; UserID agrees with Verify.
//   - An id comes only from a Bearer token of 1 to 8 KiB, and is the
//     token's sub claim (a string or an integer) of 1 to 256 bytes.
//   - A token is verified only by a key of its algorithm's family: no alg
//     "none", no HMAC token through a public key, and a kid of the JWKS
//     selects that key alone.
func FuzzBearerToken(f *testing.F) {
	v := newFuzzVerifiers(f)
	for _, auth := range tableTokens(f, v) {
		f.Add(auth)
	}
	f.Fuzz(func(t *testing.T, auth string) {
		for _, vc := range []struct {
			name string
			j    *identity.JWT
			algs []string // what it verifies without a kid of its JWKS
		}{
			{"HMAC", v.hmac, hmacAlgs},
			{"HMAC and JWKS", v.jwks, hmacAlgs},
			{"every key", v.every, []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "EdDSA"}},
		} {
			id, err := vc.j.Verify(bearerRequest(auth))
			tok, isBearer := refBearer(auth)
			header, claims, _ := tokenParts(tok)
			checkVerdict(t, vc.name+" Verify", tok, id, err)
			c := ginContext(nil)
			c.Request = bearerRequest(auth)
			if id2, err2 := vc.j.UserID(c); id2 != id || (err2 == nil) != (err == nil) {
				t.Fatalf("%s: UserID = %q, %v; Verify = %q, %v", vc.name, id2, err2, id, err)
			}
			if err != nil {
				continue
			}
			if !isBearer || header == nil {
				t.Fatalf("%s: Authorization %.100q gave id %q: not a well-formed bearer token", vc.name, auth, id)
			}
			if want, ok := refUserID(claims["sub"]); !ok || id != want {
				t.Fatalf("%s: id %q, but the token's sub is %#v", vc.name, id, claims["sub"])
			}
			alg, _ := header["alg"].(string)
			kid, _ := header["kid"].(string)
			switch {
			case vc.j == v.jwks && kid == "r1":
				if alg != "RS256" {
					t.Fatalf("%s: a %s token with kid r1 (an RS256 key) was accepted", vc.name, alg)
				}
			case vc.j == v.jwks && kid == "e1":
				if alg != "ES256" {
					t.Fatalf("%s: a %s token with kid e1 (a P-256 key) was accepted", vc.name, alg)
				}
			case !slices.Contains(vc.algs, alg):
				t.Fatalf("%s: a token of alg %q was accepted", vc.name, alg)
			}
		}
	})
}

// hs256Token signs header and claims, whatever they say, with HMAC-SHA256
// and testSecret.
func hs256Token(t *testing.T, header, claims string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	sig, err := jwt.SigningMethodHS256.Sign(signing, []byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// verdict is what the documentation says of a token: refused, accepted
// with an id, or not decided here (a time too near the clock, or too far
// from it for a date).
type verdict int

const (
	refused verdict = iota
	accepted
	undecided
)

// refTime judges a NumericDate claim (seconds since 1970) against now:
// reports whether it is a number, and whether it is well before (-1), well
// after (+1) or too near now, or too far from any date for a time (0).
func refTime(v any, now time.Time) (bool, int) {
	n, ok := v.(json.Number)
	if !ok {
		return false, 0
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.Abs(f) > 1e12 {
		return true, 0
	}
	margin := (identity.DefaultLeeway + time.Minute).Seconds()
	switch d := f - float64(now.Unix()); {
	case d < -margin:
		return true, -1
	case d > margin:
		return true, +1
	}
	return true, 0
}

// refJudge is the documented verdict on tok, an HS256-signed token with
// header and claims, for a verifier with the HMAC secret (and, with jwks,
// the key set of kids r1 and e1) reading the user id from claim.
func refJudge(tok string, header, claims []byte, claim string, jwks bool, now time.Time) (verdict, string) {
	if len(tok) > maxTokenLen {
		return refused, ""
	}
	var h map[string]any
	if json.Unmarshal(header, &h) != nil || h["alg"] != "HS256" {
		return refused, ""
	}
	if kid, ok := h["kid"].(string); jwks && ok && (kid == "r1" || kid == "e1") {
		return refused, ""
	}
	var c map[string]any
	dec := json.NewDecoder(bytes.NewReader(claims))
	dec.UseNumber()
	if dec.Decode(&c) != nil {
		return refused, ""
	}
	id, ok := refUserID(c[claim])
	if !ok {
		return refused, ""
	}
	out := accepted
	exp, ok := c["exp"]
	if !ok {
		return refused, "" // exp is required
	}
	switch isNum, when := refTime(exp, now); {
	case !isNum || when < 0:
		return refused, ""
	case when == 0:
		out = undecided
	}
	if nbf, ok := c["nbf"]; ok {
		switch isNum, when := refTime(nbf, now); {
		case !isNum || when > 0:
			return refused, ""
		case when == 0:
			out = undecided
		}
	}
	return out, id
}

// refClaim is what Claim returns for a claim value: a string, an integer
// or a boolean as text, "" otherwise.
func refClaim(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return string(v)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// FuzzJWTClaims: a token with any header and claims, signed with the HMAC
// secret, verified by a verifier reading sub, one reading uid, and one
// with a JWKS next to the secret.
//
//   - The verifier accepts exactly the tokens the documentation accepts
//     (refJudge): alg HS256, no kid of the JWKS, exp required and not past,
//     nbf not ahead, and a user id claim that is a string or an integer of
//     1 to 256 bytes, which is the id returned; any other header or claim
//     is refused.
//   - Claim returns each claim as documented.
//   - An error repeats neither the token nor any claim.
func FuzzJWTClaims(f *testing.F) {
	v := newFuzzVerifiers(f)
	for _, auth := range tableTokens(f, v) {
		tok, _ := refBearer(auth)
		parts := strings.Split(tok, ".")
		if len(parts) != 3 {
			continue
		}
		h, err1 := base64.RawURLEncoding.DecodeString(parts[0])
		c, err2 := base64.RawURLEncoding.DecodeString(parts[1])
		if err1 == nil && err2 == nil {
			f.Add(string(h), string(c))
		}
	}
	uid := mustNewJWT(f, identity.HMACSecret([]byte(testSecret)), identity.Claim("uid"))
	f.Fuzz(func(t *testing.T, header, claims string) {
		tok := hs256Token(t, header, claims)
		decoded := decodeClaims([]byte(claims))
		now := time.Now()
		for _, vc := range []struct {
			name  string
			j     *identity.JWT
			claim string
			jwks  bool
		}{
			{"HMAC", v.hmac, "sub", false},
			{"HMAC, Claim(uid)", uid, "uid", false},
			{"HMAC and JWKS", v.jwks, "sub", true},
		} {
			id, err := vc.j.Verify(bearerRequest("Bearer " + tok))
			checkVerdict(t, vc.name, tok, id, err)
			want, wantID := refJudge(tok, []byte(header), []byte(claims), vc.claim, vc.jwks, now)
			switch {
			case want == refused && err == nil:
				t.Fatalf("%s: header %.200q claims %.200q accepted as %q; the documentation refuses it", vc.name, header, claims, id)
			case want == accepted && (err != nil || id != wantID):
				t.Fatalf("%s: header %.200q claims %.200q: %q, %v; want %q", vc.name, header, claims, id, err, wantID)
			case err != nil:
				continue
			}
			c := ginContext(nil)
			c.Request = bearerRequest("Bearer " + tok)
			for name, val := range decoded {
				if got, err := vc.j.Claim(c, name); err != nil || got != refClaim(val) {
					t.Fatalf("%s: Claim(%q) = %q, %v; want %q", vc.name, name, got, err, refClaim(val))
				}
			}
		}
	})
}

// FuzzFromContext: an id the application's middleware sets, as a string,
// a named string type, a fmt.Stringer, or an integer of any kind. The
// User returns exactly the value's text when it is 1 to 256 bytes, and
// otherwise an error wrapping ErrUnauthenticated whose text is that of
// another id of the same length and kind: it says nothing of the id.
func FuzzFromContext(f *testing.F) {
	for i, tc := range fromContextAcceptCases() {
		if s, ok := tc.value.(string); ok {
			f.Add(s, int64(i), uint8(0))
		} else {
			f.Add(tc.want, int64(i), uint8(2))
		}
	}
	for i, tc := range fromContextRejectCases() {
		if s, ok := tc.values["uid"].(string); ok {
			f.Add(s, int64(-i), uint8(1))
		}
	}
	// ctxValue is the context value of kind for s or n, and its text.
	ctxValue := func(kind uint8, s string, n int64) (any, string) {
		switch kind % 6 {
		case 1:
			return namedStringID(s), s
		case 2:
			return stringerID{s}, s
		case 3:
			return n, strconv.FormatInt(n, 10)
		case 4:
			return namedIntID(n), strconv.FormatInt(n, 10)
		case 5:
			return uint64(n), strconv.FormatUint(uint64(n), 10)
		}
		return s, s
	}
	userID := func(v any) (string, error) {
		return identity.FromContext("uid").UserID(ginContext(map[string]any{"uid": v}))
	}
	f.Fuzz(func(t *testing.T, s string, n int64, kind uint8) {
		value, text := ctxValue(kind, s, n)
		id, err := userID(value)
		if text != "" && len(text) <= identity.MaxUserIDLen {
			if err != nil || id != text {
				t.Fatalf("UserID with %T(%.80q) = %q, %v; want %q", value, s, id, err, text)
			}
			return
		}
		if id != "" || !errors.Is(err, identity.ErrUnauthenticated) {
			t.Fatalf("UserID with %T of %d bytes = %q, %v; want an error wrapping ErrUnauthenticated", value, len(text), id, err)
		}
		// Another id of the same length and kind: every byte changed.
		other := []byte(s)
		for i := range other {
			other[i] ^= 0x55
		}
		otherValue, _ := ctxValue(kind, string(other), n)
		if _, err2 := userID(otherValue); err2 == nil || err2.Error() != err.Error() {
			t.Fatalf("UserID's error for an id of %d bytes, %q, is not that of another such id, %v: it tells them apart", len(text), err, err2)
		}
	})
}
