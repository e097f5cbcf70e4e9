package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"

	"github.com/golang-jwt/jwt/v5"
)

// jwks is a parsed JSON Web Key Set: verification keys by kid.
type jwks map[string]jwkKey

// JWKS verifies tokens with the keys of a JSON Web Key Set (RFC 7517), chosen
// by the token's kid header: RSA, EC (P-256, P-384, P-521) and OKP Ed25519
// keys are read; others, and keys whose "use" is not "sig", are skipped. A
// token's algorithm must belong to its key's family (and equal the key's
// "alg" when it has one). Call [JWT.ReloadJWKS] with a new set to rotate.
//
// RSA keys must have a modulus of 2048 to 8192 bits and an odd public
// exponent from 65537 to 2^31-1. A set holding any other or malformed key
// is refused whole, naming the key's index and kid: loading half a set
// would silently drop a key that tokens are being signed with. Beside an
// [HMACSecret] or a [PublicKey], [JWT] says how the kid picks the key.
func JWKS(data []byte) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		set, err := parseJWKS(data)
		if err != nil {
			return err
		}
		c.jwks = set
		return nil
	})
}

// JWKSFile is [JWKS] read from a file; [JWT.ReloadJWKS] with nil data reads
// the file again.
func JWKSFile(path string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("identity: JWKSFile: %w", err)
		}
		set, err := parseJWKS(data)
		if err != nil {
			return err
		}
		c.jwks, c.jwksPath = set, path
		return nil
	})
}

// ReloadJWKS replaces the key set: with data, from it; with nil data, from
// the JWKSFile again. Tokens being verified meanwhile use the old or the
// new set, never a mix. A bad set is refused as a whole and the old one
// stays in force: one weak or malformed key (see [JWKS]) fails the rotation
// with an error naming its kid, so the operator sees it while the old keys
// keep serving.
func (j *JWT) ReloadJWKS(data []byte) error {
	if data == nil {
		if j.jwksPath == "" {
			return errors.New("identity: ReloadJWKS(nil): the verifier has no JWKSFile")
		}
		var err error
		if data, err = os.ReadFile(j.jwksPath); err != nil {
			return fmt.Errorf("identity: ReloadJWKS: %w", err)
		}
	}
	set, err := parseJWKS(data)
	if err != nil {
		return err
	}
	j.jwks.Store(&set)
	return nil
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// jwkKey is a key of the set with the algorithm its entry named, if any.
type jwkKey struct {
	key crypto.PublicKey
	alg string
}

func parseJWKS(data []byte) (jwks, error) {
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("identity: JWKS: %w", err)
	}
	return newJWKS(doc.Keys)
}

// newJWKS builds a set from its entries. It is the one place where keys are
// vetted: [JWKS], [JWKSFile], [JWT.ReloadJWKS] and [RemoteJWKS] all come
// through it, so a key refused from a file is refused from a URL too.
func newJWKS(keys []jwk) (jwks, error) {
	set := jwks{}
	for i, k := range keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key, err := k.publicKey()
		if err != nil {
			return nil, fmt.Errorf("identity: JWKS key %d (kid %q): %w", i, k.Kid, err)
		}
		if key == nil {
			continue // a kind of key we do not verify with
		}
		if _, dup := set[k.Kid]; dup {
			return nil, fmt.Errorf("identity: JWKS: kid %q appears twice", k.Kid)
		}
		set[k.Kid] = jwkKey{key: key, alg: k.Alg}
	}
	if len(set) == 0 {
		return nil, errors.New("identity: JWKS: no usable signing key")
	}
	return set, nil
}

// minRSABits and minRSAExponent are the weakest RSA key a JWKS may hold:
// 2048 bits (NIST SP 800-131A, RFC 7518 section 3.3) and e = 65537 (FIPS
// 186-5 section 5.5 asks for 2^16 < e). maxRSABits is the largest, the
// bound crypto/tls puts on a peer's key: a verification's cost grows with
// the square of the modulus and more (65,536 bits took 0.76 s per token),
// so a bigger key would make every token that names its kid a denial of
// service.
const (
	minRSABits     = 2048
	maxRSABits     = 8192
	minRSAExponent = 65537
)

// checkRSA refuses an RSA public key that is too weak or too costly to
// verify with, or that crypto/rsa would refuse to verify with (an even
// modulus, an even exponent, or one beyond 2^31-1), so that such a key
// fails when the set is loaded rather than on every token.
func checkRSA(k *rsa.PublicKey) error {
	switch {
	case k.N.BitLen() < minRSABits:
		return fmt.Errorf("RSA modulus of %d bits, want at least %d", k.N.BitLen(), minRSABits)
	case k.N.BitLen() > maxRSABits:
		return fmt.Errorf("RSA modulus of %d bits, want at most %d", k.N.BitLen(), maxRSABits)
	case k.N.Bit(0) == 0:
		return errors.New("RSA modulus is even")
	case k.E < minRSAExponent:
		return fmt.Errorf("RSA public exponent %d, want at least %d", k.E, minRSAExponent)
	case k.E&1 == 0:
		return fmt.Errorf("RSA public exponent %d is even", k.E)
	case k.E > 1<<31-1:
		return fmt.Errorf("RSA public exponent %d, want at most 2^31-1", k.E)
	}
	return nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func (k jwk) publicKey() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err := errors.Join(err1, err2); err != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA n or e")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if err := checkRSA(pub); err != nil {
			return nil, err
		}
		return pub, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("unsupported curve %q", k.Crv)
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		size := (curve.Params().BitSize + 7) / 8
		if err := errors.Join(err1, err2); err != nil || len(x) != size || len(y) != size {
			return nil, errors.New("bad EC x or y")
		}
		point := append(append([]byte{4}, x...), y...)
		return ecdsa.ParseUncompressedPublicKey(curve, point)
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, nil
		}
		x, err := b64(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad Ed25519 x")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, nil
}

// keyFor returns the key kid names, checked against the token's algorithm
// family.
func (s jwks) keyFor(t *jwt.Token, kid string) (any, error) {
	entry, ok := s[kid]
	if !ok {
		return nil, errUnknownKID
	}
	k := entry
	if k.alg != "" && k.alg != t.Method.Alg() {
		return nil, fmt.Errorf("%w: the token's kid is for %s, not %s", errNoKeyAlg, k.alg, t.Method.Alg())
	}
	one := keySet{}
	switch pub := k.key.(type) {
	case *rsa.PublicKey:
		one.rsa = pub
	case *ecdsa.PublicKey:
		one.ecdsa = pub
	case ed25519.PublicKey:
		one.ed25519 = pub
	}
	return one.keyFor(t)
}
