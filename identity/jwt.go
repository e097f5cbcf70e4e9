package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
)

// DefaultLeeway is the clock skew allowed when checking exp and nbf.
const DefaultLeeway = 10 * time.Second

// MinHMACSecretLen is the shortest HMAC secret accepted, in bytes: RFC 7518
// section 3.2 requires a key at least as long as the hash output, and 32
// bytes is that for HS256.
const MinHMACSecretLen = 32

// maxTokenLen bounds the bearer token parsed, so that a huge header cannot
// buy expensive work. Real tokens are well under 1 KiB.
const maxTokenLen = 8 << 10

// JWT is a [User] that verifies the bearer token in the Authorization header
// with golang-jwt v5 and reads the user id from one of its claims.
//
// Only the algorithms of the configured keys are accepted (an HMAC secret:
// HS256/384/512; RSA: RS* and PS*; ECDSA: the ES algorithm of its curve;
// Ed25519: EdDSA), and each token is verified with the key of its own
// family, so "alg": "none" and algorithm confusion fail. With a [JWKS]
// beside other keys, a kid the set has selects that key alone (an HS256
// token carrying it is refused); a token with no kid, or one the set
// lacks, is verified with the other keys of its family. exp is required;
// exp and nbf are checked with [DefaultLeeway] unless [Leeway] says
// otherwise.
//
// A JWT is safe for concurrent use. One with a [RemoteJWKS] runs a
// goroutine until its context is done or [JWT.Close] is called.
type JWT struct {
	parser   *jwt.Parser
	algs     []string // the accepted algorithms, to tell a refused one (parseReason)
	keys     keySet
	claim    string
	jwks     atomic.Pointer[jwks]
	jwksPath string
	remote   *remoteJWKS // nil without RemoteJWKS
}

var (
	_ User      = (*JWT)(nil)
	_ io.Closer = (*JWT)(nil)
)

// JWTOption configures [NewJWT].
type JWTOption interface {
	apply(*jwtConfig) error
}

type jwtOptionFunc func(*jwtConfig) error

func (f jwtOptionFunc) apply(c *jwtConfig) error { return f(c) }

type keySet struct {
	hmac    []byte
	rsa     *rsa.PublicKey
	ecdsa   *ecdsa.PublicKey
	ed25519 ed25519.PublicKey
}

type jwtConfig struct {
	keys      keySet
	jwks      jwks
	jwksPath  string
	remote    *remoteConfig
	algs      []string
	claim     string
	leeway    time.Duration
	issuer    string
	audience  string
	expiryOpt bool
}

// HMACSecret verifies HS256, HS384 and HS512 tokens with secret, which must
// be at least [MinHMACSecretLen] bytes.
func HMACSecret(secret []byte) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		if len(secret) < MinHMACSecretLen {
			return fmt.Errorf("identity: HMACSecret: the secret is %d bytes, want at least %d", len(secret), MinHMACSecretLen)
		}
		if c.keys.hmac != nil {
			return errors.New("identity: HMACSecret: given twice")
		}
		c.keys.hmac = slices.Clone(secret)
		return nil
	})
}

// PublicKey verifies tokens signed with the private half of key, which must be
// an *rsa.PublicKey, an *ecdsa.PublicKey (P-256, P-384 or P-521) or an
// ed25519.PublicKey. At most one key of each kind may be given.
func PublicKey(key crypto.PublicKey) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		switch k := key.(type) {
		case *rsa.PublicKey:
			if k == nil || c.keys.rsa != nil {
				return errors.New("identity: PublicKey: nil or second RSA key")
			}
			c.keys.rsa = k
		case *ecdsa.PublicKey:
			if k == nil || c.keys.ecdsa != nil {
				return errors.New("identity: PublicKey: nil or second ECDSA key")
			}
			if ecdsaAlg(k) == "" {
				return errors.New("identity: PublicKey: unsupported ECDSA curve")
			}
			c.keys.ecdsa = k
		case ed25519.PublicKey:
			if len(k) != ed25519.PublicKeySize || c.keys.ed25519 != nil {
				return errors.New("identity: PublicKey: bad or second Ed25519 key")
			}
			c.keys.ed25519 = k
		default:
			return fmt.Errorf("identity: PublicKey: unsupported key type %T", key)
		}
		return nil
	})
}

// Algorithms narrows the accepted algorithms (for example "HS256") to the
// given ones. Each must belong to a configured key.
func Algorithms(algs ...string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		if len(algs) == 0 {
			return errors.New("identity: Algorithms: no algorithm given")
		}
		c.algs = slices.Clone(algs)
		return nil
	})
}

// Claim names the claim that holds the user id. The default is "sub". The
// claim may be a string or an integer.
func Claim(name string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		if name == "" {
			return errors.New("identity: Claim: empty claim name")
		}
		c.claim = name
		return nil
	})
}

// Leeway sets the clock skew allowed for exp and nbf. The default is
// [DefaultLeeway]; it must be between 0 and 5 minutes.
func Leeway(d time.Duration) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		if d < 0 || d > 5*time.Minute {
			return fmt.Errorf("identity: Leeway(%v): want 0 to 5m", d)
		}
		c.leeway = d
		return nil
	})
}

// Issuer requires the iss claim to equal iss.
func Issuer(iss string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		c.issuer = iss
		return nil
	})
}

// Audience requires the aud claim to contain aud.
func Audience(aud string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		c.audience = aud
		return nil
	})
}

// WithoutExpiry accepts tokens that carry no exp claim. By default they are
// rejected, because such a token can never be revoked by time.
func WithoutExpiry() JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		c.expiryOpt = true
		return nil
	})
}

// NewJWT returns a JWT verifier. At least one source of keys ([HMACSecret],
// [PublicKey], [JWKS], [JWKSFile] or [RemoteJWKS]) is required; RemoteJWKS
// excludes JWKS and JWKSFile. With RemoteJWKS, NewJWT makes
// the first fetch and waits for it at most the [StartupTimeout]; call
// [JWT.Close] when done with the verifier.
func NewJWT(opts ...JWTOption) (*JWT, error) {
	cfg := jwtConfig{claim: "sub", leeway: DefaultLeeway}
	for _, o := range opts {
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.remote != nil && cfg.jwks != nil {
		return nil, errors.New("identity: NewJWT: RemoteJWKS with JWKS or JWKSFile: give one source of key sets")
	}
	keyAlgs := cfg.keys.algorithms()
	if cfg.jwks != nil || cfg.remote != nil {
		// A JWKS may gain any asymmetric family on reload; each token is
		// still checked against its own key's family in keyFor.
		for _, a := range []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"} {
			if !slices.Contains(keyAlgs, a) {
				keyAlgs = append(keyAlgs, a)
			}
		}
	}
	if len(keyAlgs) == 0 {
		return nil, errors.New("identity: NewJWT: no key: give HMACSecret, PublicKey, JWKS, JWKSFile or RemoteJWKS")
	}
	algs := keyAlgs
	if cfg.algs != nil {
		for _, a := range cfg.algs {
			if !slices.Contains(keyAlgs, a) {
				return nil, fmt.Errorf("identity: Algorithms: %q has no configured key (have %v)", a, keyAlgs)
			}
		}
		algs = cfg.algs
	}
	popts := []jwt.ParserOption{
		jwt.WithValidMethods(algs),
		jwt.WithLeeway(cfg.leeway),
		jwt.WithJSONNumber(),
	}
	if !cfg.expiryOpt {
		popts = append(popts, jwt.WithExpirationRequired())
	}
	if cfg.issuer != "" {
		popts = append(popts, jwt.WithIssuer(cfg.issuer))
	}
	if cfg.audience != "" {
		popts = append(popts, jwt.WithAudience(cfg.audience))
	}
	j := &JWT{parser: jwt.NewParser(popts...), algs: algs, keys: cfg.keys, claim: cfg.claim, jwksPath: cfg.jwksPath}
	if cfg.jwks != nil {
		j.jwks.Store(&cfg.jwks)
	}
	if cfg.remote != nil {
		r, err := startRemote(cfg.remote, func(s jwks) { j.jwks.Store(&s) })
		if err != nil {
			return nil, err
		}
		j.remote = r
	}
	return j, nil
}

// Close stops the background refresh of a [RemoteJWKS] and waits until it
// has stopped (an in-flight fetch is cancelled). The set in force keeps
// verifying tokens, but is no longer refreshed. Close is a no-op for a JWT
// without RemoteJWKS, may be called more than once, and returns nil.
func (j *JWT) Close() error {
	if j.remote != nil {
		j.remote.close()
	}
	return nil
}

// JWKSLoaded reports whether a JSON Web Key Set is in force: always with
// [JWKS] or [JWKSFile], with [RemoteJWKS] once a fetch has succeeded (for a
// readiness check), never without any of them.
func (j *JWT) JWKSLoaded() bool { return j.jwks.Load() != nil }

func (k keySet) algorithms() []string {
	var algs []string
	if k.hmac != nil {
		algs = append(algs, "HS256", "HS384", "HS512")
	}
	if k.rsa != nil {
		algs = append(algs, "RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
	}
	if k.ecdsa != nil {
		algs = append(algs, ecdsaAlg(k.ecdsa))
	}
	if k.ed25519 != nil {
		algs = append(algs, "EdDSA")
	}
	return algs
}

func ecdsaAlg(k *ecdsa.PublicKey) string {
	switch k.Curve {
	case elliptic.P256():
		return "ES256"
	case elliptic.P384():
		return "ES384"
	case elliptic.P521():
		return "ES512"
	}
	return ""
}

// keyFor picks the verification key by the token's algorithm family, so a
// key is never used with an algorithm of another family.
func (k keySet) keyFor(t *jwt.Token) (any, error) {
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		if k.hmac != nil {
			return k.hmac, nil
		}
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		if k.rsa != nil {
			return k.rsa, nil
		}
	case *jwt.SigningMethodECDSA:
		if k.ecdsa != nil && t.Method.Alg() == ecdsaAlg(k.ecdsa) {
			return k.ecdsa, nil
		}
	case *jwt.SigningMethodEd25519:
		if k.ed25519 != nil {
			return k.ed25519, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", errNoKeyAlg, t.Method.Alg())
}

// keyFor picks the verification key. A kid that the JWKS has selects that
// key and only it: a token naming a JWKS key never falls back to the HMAC
// secret or a [PublicKey], even when it fails there. Any other token (no kid,
// a kid that is null or not a string, or a kid the set lacks) is verified
// with the configured keys by its algorithm family; with no configured keys,
// a token without a kid may use the set's kid-less key.
//
// With a [RemoteJWKS], a token of an asymmetric algorithm that finds no set,
// or whose kid the set lacks, asks for a new set (see [RemoteJWKS]) and is
// then judged without waiting for it.
func (j *JWT) keyFor(t *jwt.Token) (any, error) {
	set := j.jwks.Load()
	if set == nil {
		if j.remote == nil {
			return j.keys.keyFor(t)
		}
		if wants(t) {
			j.remote.want()
		}
		k, err := j.keys.keyFor(t)
		if err != nil {
			// The key would be in the set that has not come yet.
			return nil, fmt.Errorf("%w: no key set loaded yet", errUnknownKID)
		}
		return k, nil
	}
	kid, named := t.Header["kid"].(string)
	if named {
		if _, ok := (*set)[kid]; ok {
			return set.keyFor(t, kid)
		}
		if j.remote != nil && wants(t) {
			j.remote.want()
		}
	}
	if j.keys.algorithms() == nil {
		if named {
			return nil, errUnknownKID
		}
		return set.keyFor(t, "")
	}
	return j.keys.keyFor(t)
}

// UserID verifies the request's bearer token and returns the user id claim.
// Every error wraps [ErrUnauthenticated].
func (j *JWT) UserID(c *gin.Context) (string, error) {
	return j.Verify(c.Request)
}

// Verify is [JWT.UserID] for a plain *http.Request.
func (j *JWT) Verify(r *http.Request) (string, error) {
	claims, err := j.verified(r)
	if err != nil {
		return "", err
	}
	var id string
	switch v := claims[j.claim].(type) {
	case string:
		id = v
	case json.Number:
		if !isInteger(string(v)) {
			return "", fail(ReasonClaims, fmt.Errorf("%w: claim %q is not an integer", ErrUnauthenticated, j.claim))
		}
		id = string(v)
	case nil:
		return "", fail(ReasonClaims, fmt.Errorf("%w: no claim %q", ErrUnauthenticated, j.claim))
	default:
		return "", fail(ReasonClaims, fmt.Errorf("%w: claim %q is a %T, not a string or integer", ErrUnauthenticated, j.claim, v))
	}
	if _, err := checkID(id); err != nil {
		return "", fail(ReasonClaims, err)
	}
	return id, nil
}

// verified returns the claims of the request's valid bearer token.
func (j *JWT) verified(r *http.Request) (jwt.MapClaims, error) {
	raw, err := bearer(r)
	if err != nil {
		return nil, err
	}
	claims := jwt.MapClaims{}
	tok, err := j.parser.ParseWithClaims(raw, claims, j.keyFor)
	if err != nil {
		return nil, fail(parseReason(err, tok, j.algs), fmt.Errorf("%w: %w", ErrUnauthenticated, err))
	}
	return claims, nil
}

// Claim returns the named claim of the request's verified token as text (a
// string, or an integer written out), "" when the token lacks it. It fails
// like UserID when the token is not valid.
func (j *JWT) Claim(c *gin.Context, name string) (string, error) {
	claims, err := j.verified(c.Request)
	if err != nil {
		return "", err
	}
	switch v := claims[name].(type) {
	case string:
		return v, nil
	case json.Number:
		return string(v), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", nil
}

// Claimer is implemented by Users that can also read a claim of the
// authenticated user, such as *JWT: a ginlimit.LimitBy pick function can
// read a plan from a claim with it.
type Claimer interface {
	Claim(c *gin.Context, name string) (string, error)
}

var _ Claimer = (*JWT)(nil)

// Challenge is the WWW-Authenticate value for a 401 (RFC 6750).
func (j *JWT) Challenge() string { return `Bearer` }

func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", fail(ReasonMissing, fmt.Errorf("%w: no Authorization header", ErrUnauthenticated))
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fail(ReasonMalformed, fmt.Errorf("%w: Authorization is not a Bearer token", ErrUnauthenticated))
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || len(tok) > maxTokenLen {
		return "", fail(ReasonMalformed, fmt.Errorf("%w: empty or oversized bearer token", ErrUnauthenticated))
	}
	return tok, nil
}

func isInteger(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
