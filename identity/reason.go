package identity

import (
	"errors"
	"slices"

	"github.com/golang-jwt/jwt/v5"
)

// The reasons a request has no identity, as [Reason] names them. They are
// few and fixed so that they can label a metric: an operator who sees every
// request fail with ReasonBadSignature knows to compare the secrets, one who
// sees ReasonExpired to look at the clocks or the token lifetime. None of
// them carries anything of the token or of the identity.
const (
	// ReasonMissing: the request carries no credentials (no Authorization
	// header; for [FromContext], no value under the key).
	ReasonMissing = "missing"
	// ReasonMalformed: the credentials are not a well-formed bearer JWT
	// (another scheme, an empty or oversized token, bad segments or
	// encoding), or a [FromContext] value of an unusable type, empty or
	// too long.
	ReasonMalformed = "malformed"
	// ReasonBadSignature: the token's signature does not verify with the
	// key chosen for it: typically a wrong or rotated secret or key.
	ReasonBadSignature = "bad_signature"
	// ReasonExpired: the token's exp is past, beyond the leeway.
	ReasonExpired = "expired"
	// ReasonNotYetValid: the token's nbf or iat is ahead, beyond the
	// leeway: typically a clock out of step.
	ReasonNotYetValid = "not_yet_valid"
	// ReasonUnknownKID: the token names a kid the key set does not have
	// (or names none, and the set has no key without one), or no key set
	// is loaded yet, and no other key may verify it.
	ReasonUnknownKID = "unknown_kid"
	// ReasonAlgorithm: the token's alg is not accepted ("none", an
	// algorithm outside [Algorithms] or of a family with no key), or the
	// key its kid names is for another algorithm.
	ReasonAlgorithm = "algorithm"
	// ReasonClaims: the signature verifies but a claim is wrong: exp
	// missing, iss or aud not the expected ones, or the user id claim
	// missing, of the wrong type, empty or too long.
	ReasonClaims = "claims"
	// ReasonOther: any other failure that wraps [ErrUnauthenticated], such
	// as one from a [User] of the application's own.
	ReasonOther = "other"
)

// Reasons returns every reason [Reason] can return for an
// unauthenticated request, in a new slice.
func Reasons() []string {
	return []string{
		ReasonMissing, ReasonMalformed, ReasonBadSignature, ReasonExpired,
		ReasonNotYetValid, ReasonUnknownKID, ReasonAlgorithm, ReasonClaims, ReasonOther,
	}
}

// Reason classifies an error a [User] returned: one of the Reason
// constants when err wraps [ErrUnauthenticated] (ReasonOther when nothing
// more precise is known), "" when it does not (nil, or another failure,
// such as a misconfiguration). The error's text is not for logs or
// metrics, as a User of the application's own may put the identity in
// it; the reason is.
func Reason(err error) string {
	if !errors.Is(err, ErrUnauthenticated) {
		return ""
	}
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return ReasonOther
}

// failure is an [ErrUnauthenticated] error of this package with its
// reason. It reads and unwraps as the error it holds.
type failure struct {
	reason string
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// fail gives err, which wraps ErrUnauthenticated, its reason.
func fail(reason string, err error) error { return &failure{reason: reason, err: err} }

// The errors keyFor returns, which the parser wraps: they tell the
// reason of a token no key could be found for.
var (
	errUnknownKID = errors.New("no key with the token's kid")
	errNoKeyAlg   = errors.New("no key for the token's algorithm")
)

// parseReason classifies an error of the parser: algs are the accepted
// algorithms and tok the token as far as it was parsed (nil when it
// could not be).
func parseReason(err error, tok *jwt.Token, algs []string) string {
	switch {
	case errors.Is(err, errUnknownKID):
		return ReasonUnknownKID
	case errors.Is(err, errNoKeyAlg):
		return ReasonAlgorithm
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ReasonMalformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// The parser refuses an algorithm outside algs with this same
		// error, before any key is tried.
		if tok != nil && tok.Method != nil && !slices.Contains(algs, tok.Method.Alg()) {
			return ReasonAlgorithm
		}
		return ReasonBadSignature
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// An alg the library does not know, or none at all.
		return ReasonAlgorithm
	case errors.Is(err, jwt.ErrTokenExpired):
		return ReasonExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ReasonNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return ReasonClaims
	}
	return ReasonOther
}
