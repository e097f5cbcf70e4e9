package ginlimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// A rule's dimension is what its limit is counted per. This file is where
// a new dimension goes: a LimitType, its case in identify, and its options.

// LimitType says what a rule's limit is counted per: the whole route, each
// client IP, or each authenticated user. It is the Java annotation's type.
type LimitType int

const (
	// Method counts every request to the route in one bucket.
	Method LimitType = iota
	// IP counts per client IP address (see identity.IP for proxies).
	IP
	// User counts per authenticated user id. A request without a valid
	// identity is answered 401 and counted nowhere.
	User
)

// String returns "Method", "IP" or "User".
func (t LimitType) String() string {
	switch t {
	case Method:
		return "Method"
	case IP:
		return "IP"
	case User:
		return "User"
	}
	return fmt.Sprintf("LimitType(%d)", int(t))
}

// Type sets what the limit is counted per: [Method] (the default), [IP] or
// [User].
func Type(t LimitType) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if t < Method || t > User {
			return fmt.Errorf("Type(%v): want Method, IP or User", t)
		}
		r.typ = t
		return nil
	})
}

// IPIdentity sets how the client IP of an [IP] rule is found, in particular
// which proxies are trusted to send X-Forwarded-For. By default no proxy is
// trusted and the client is the TCP peer.
func IPIdentity(ip *identity.IP) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if ip == nil {
			return errors.New("IPIdentity(nil): the resolver must not be nil")
		}
		r.ips = ip
		return nil
	})
}

// UserIdentity sets how the user of a [User] rule is found, for example
// identity.NewJWT(...) or identity.FromContext("user_id"). A [User] rule
// without it is a configuration error. Different rules of one route may
// count different identities, for example the user from a JWT and the
// tenant from identity.FromContext("tenant").
func UserIdentity(u identity.User) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if u == nil {
			return errors.New("UserIdentity(nil): the resolver must not be nil")
		}
		r.users = u
		return nil
	})
}

// HashIdentities puts an HMAC-SHA256 of each identity (keyed with secret,
// which must be at least 32 bytes) into Redis keys instead of the raw IP
// address or user id, so no personal data sits in Redis: a key then reads
// "user:<32 hex digits>". Keep secret stable across instances and restarts,
// or every identity gets a fresh bucket. The default is off.
func HashIdentities(secret []byte) RuleOption {
	secret = append([]byte(nil), secret...)
	return ruleOption(func(r *ruleConfig) error {
		if len(secret) < 32 {
			return fmt.Errorf("HashIdentities: the secret is %d bytes, want at least 32", len(secret))
		}
		r.hashKey = secret
		return nil
	})
}

// AnonymousByIP makes a User rule count requests without a valid identity
// per client IP (in their own "anon:" buckets) instead of answering 401.
// The default is 401: no shared anonymous bucket.
func AnonymousByIP() RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		r.anonByIP = true
		return nil
	})
}

// who is the identity part of a request's key: the dimension (" ip:",
// " user:", " anon:", or "" for Method), the identity text, and which bytes
// of that text stand for themselves in a key. The text of an IP address
// lives in buf, so that no allocation is needed for it.
type who struct {
	dim  string
	id   string
	safe func(byte) bool
	buf  [64]byte
}

// identify finds the request's identity for rule r. With HashIdentities
// the text is an HMAC of the identity instead of the identity.
func (r *rule) identify(c *gin.Context, w *who) error {
	switch r.typ {
	case Method:
		w.dim, w.id = "", ""
		return nil
	case IP:
		if err := r.clientIP(c, w, " ip:"); err != nil {
			return err
		}
	case User:
		uid, err := r.users.UserID(c)
		switch {
		case err == nil:
			w.dim, w.id, w.safe = " user:", uid, idSafe
		case r.anonByIP && errors.Is(err, identity.ErrUnauthenticated):
			if err := r.clientIP(c, w, " anon:"); err != nil {
				return err
			}
		default:
			return err
		}
	}
	r.seal(w)
	return nil
}

// seal replaces w's identity by its HMAC when the rule has
// [HashIdentities]. Every identity goes through it on its way into a key:
// a request's (identify) and a [Target]'s.
func (r *rule) seal(w *who) {
	if r.hashKey != nil && w.dim != "" {
		w.id, w.safe = hashIdentity(r.hashKey, w.dim, w.id), routeSafe
	}
}

// clientIP resolves the client's address and its bucket text into w.
func (r *rule) clientIP(c *gin.Context, w *who, dim string) error {
	addr, err := r.ips.Resolve(c.Request)
	if err != nil {
		return err
	}
	r.ipWho(w, addr, dim)
	return nil
}

// ipWho sets w to the text that stands for addr in a key under dimension
// dim: an IPv4 address itself, an IPv6 address its bucket (see
// identity.IP.Bucket).
func (r *rule) ipWho(w *who, addr netip.Addr, dim string) {
	var text []byte
	if addr.Is4() {
		text = addr.AppendTo(w.buf[:0])
	} else {
		text = r.ips.Bucket(addr).AppendTo(w.buf[:0])
	}
	w.dim, w.id, w.safe = dim, unsafeString(text), routeSafe
}

// hashIdentity returns the hex HMAC of the dimension and identity, cut to
// 128 bits.
func hashIdentity(secret []byte, dim, id string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(dim))
	m.Write([]byte(id))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:16])
}

// logTag is what a log line may say about the identity of a request: the
// first 12 hex digits of the HMAC that [HashIdentities] puts into the key,
// keyed with the rule's secret or, without one, with the policy's own
// random secret, so lines about one client can be told apart but no
// identity is written down.
func (w *who) logTag(r *rule, secret []byte) string {
	if w.dim == "" {
		return ""
	}
	if r.hashKey != nil {
		return w.id[:12]
	}
	return hashIdentity(secret, w.dim, w.id)[:12]
}
