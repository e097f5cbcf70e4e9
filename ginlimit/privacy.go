package ginlimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// HashIdentities puts an HMAC-SHA256 of each identity (keyed with secret,
// which must be at least 32 bytes) into Redis keys instead of the raw IP
// address or user id, so no personal data sits in Redis: a key then reads
// "user:<32 hex digits>". Keep secret stable across instances and restarts,
// or every identity gets a fresh bucket. The default is off.
func HashIdentities(secret []byte) Option {
	secret = slices.Clone(secret)
	return optionFunc(func(s *settings) {
		if len(secret) < 32 {
			s.invalid("HashIdentities: the secret is %d bytes, want at least 32", len(secret))
			return
		}
		s.hashKey = secret
	})
}

// AnonymousByIP makes a User rule count requests without a valid identity
// per client IP (in their own "anon:" buckets) instead of answering 401.
// The default is 401: no shared anonymous bucket.
func AnonymousByIP() Option {
	return optionFunc(func(s *settings) { s.anonByIP = true })
}

// hashIdentity returns the hex HMAC of the dimension and identity, cut to
// 128 bits.
func (p *Policy) hashIdentity(dim, id string) string {
	m := hmac.New(sha256.New, p.hashKey)
	m.Write([]byte(dim))
	m.Write([]byte(id))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:16])
}
