package identity_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

// TestReasonKeySet checks the reasons of the refusals a key set adds to
// those of jwtRejectCases: a kid the set lacks, a kid of another
// algorithm, and a set not loaded yet.
func TestReasonKeySet(t *testing.T) {
	t.Parallel()
	k := testKeys()
	set := `{"keys":[` + rsaJWK("r1", &k.rsa.PublicKey) + `]}`
	local := mustNewJWT(t, identity.JWKS([]byte(set)))
	// A provider that never answers: the verifier starts with no set.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	down := mustNewJWT(t, identity.RemoteJWKS(ctx, "http://127.0.0.1:1/jwks.json", identity.StartupTimeout(time.Millisecond)))
	defer down.Close()

	tests := []struct {
		name string
		j    *identity.JWT
		tok  string
		want string
	}{
		{"the set's key", local, signKid(t, jwt.SigningMethodRS256, k.rsa, "r1", "alice"), ""},
		{"kid the set lacks", local, signKid(t, jwt.SigningMethodRS256, k.rsa, "r9", "alice"), identity.ReasonUnknownKID},
		{"no kid, no kid-less key", local, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil)), identity.ReasonUnknownKID},
		{"kid of an RS256 key on a PS256 token", local, signKid(t, jwt.SigningMethodPS256, k.rsa, "r1", "alice"), identity.ReasonAlgorithm},
		{"kid signed by another key", local, signKid(t, jwt.SigningMethodRS256, k.rsa2, "r1", "alice"), identity.ReasonBadSignature},
		{"no set loaded yet", down, signKid(t, jwt.SigningMethodRS256, k.rsa, "r1", "alice"), identity.ReasonUnknownKID},
	}
	for _, tc := range tests {
		_, err := tc.j.Verify(bearerRequest("Bearer " + tc.tok))
		if got := identity.Reason(err); got != tc.want {
			t.Errorf("%s: Reason(%v) = %q, want %q", tc.name, err, got, tc.want)
		}
	}
}

// TestReasonFromContext checks the reasons of identity.FromContext.
func TestReasonFromContext(t *testing.T) {
	t.Parallel()
	u := identity.FromContext("uid")
	tests := []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"uid": "alice"}, ""},
		{nil, identity.ReasonMissing},
		{map[string]any{"uid": 1.5}, identity.ReasonMalformed},
		{map[string]any{"uid": ""}, identity.ReasonMalformed},
		{map[string]any{"uid": string(make([]byte, identity.MaxUserIDLen+1))}, identity.ReasonMalformed},
	}
	for _, tc := range tests {
		_, err := u.UserID(ginContext(tc.values))
		if got := identity.Reason(err); got != tc.want {
			t.Errorf("%v: Reason(%v) = %q, want %q", tc.values, err, got, tc.want)
		}
	}
}

// TestReasonOfOtherErrors checks Reason on errors this package did not
// classify: an application's own unauthenticated error is ReasonOther,
// and an error that is no identity failure has no reason.
func TestReasonOfOtherErrors(t *testing.T) {
	t.Parallel()
	own := fmt.Errorf("%w: session revoked", identity.ErrUnauthenticated)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("database down"), ""},
		{own, identity.ReasonOther},
		{fmt.Errorf("wrapped: %w", own), identity.ReasonOther},
	} {
		if got := identity.Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestReasons checks that Reasons lists every reason once, and that
// callers cannot change it.
func TestReasons(t *testing.T) {
	t.Parallel()
	rs := identity.Reasons()
	want := []string{
		identity.ReasonMissing, identity.ReasonMalformed, identity.ReasonBadSignature,
		identity.ReasonExpired, identity.ReasonNotYetValid, identity.ReasonUnknownKID,
		identity.ReasonAlgorithm, identity.ReasonClaims, identity.ReasonOther,
	}
	if !slices.Equal(rs, want) {
		t.Fatalf("Reasons() = %v, want %v", rs, want)
	}
	rs[0] = "changed"
	if identity.Reasons()[0] != identity.ReasonMissing {
		t.Fatal("Reasons returned a slice the caller can change")
	}
}
