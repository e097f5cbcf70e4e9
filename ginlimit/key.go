package ginlimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unsafe"

	"github.com/gin-gonic/gin"
)

// The Redis key of one rule's count is built here, and only here, by
// buildKey:
//
//	<prefix>{<scope>[ <dimension>]}                 a route with one rule
//	<prefix>{<scope>} rule:<name>[ <dimension>]     a route with Rules
//
// The scope is "<METHOD> <route template>" for a request ("* unmatched"
// for one that matched no route), or the caller's key for [Policy.Allow].
// The dimension is one " <label>:<value>" per dimension the rule counts per
// ([Per]), in the rule's order: "ip:<addr>", "user:<id>", "anon:<addr>",
// "p.<param>:<value>", "h.<header>:<value>", "f.<name>:<value>"; with
// [HashIdentities], one "<labels joined by +>:<hmac>". The braces are the Redis Cluster hash tag: the keys of one
// route's Rules share a slot, so one script can decide them together. The
// scope and the identity are escaped: '%', '{', '}', spaces and
// non-printable bytes become %XX, and user ids and the other values taken
// from the request keep only unreserved characters, so no identity can spell another identity's key and nothing
// can close the hash tag early. IP addresses are canonical netip text. An
// identity value or Allow key longer than maxKeyText goes in as a hash, so
// a key is never longer than its configuration allows.
//
// The prefix ends with the algorithm's tag (algorithm.go: keyTag), so two
// algorithms, or two shapes of one algorithm's data, never share a key.

const hexDigits = "0123456789ABCDEF"

// charset says which bytes of a text stand for themselves in a key; the
// others are percent-encoded. It is a value, not a func(byte) bool, so that
// the per-byte test is inlined: building a key tests every byte of its
// text, and a call through a func value per byte would dominate it.
type charset uint8

const (
	// routeSafe is the scope's set (and a hashed identity's): printable
	// ASCII but space, '%', '{' and '}'.
	routeSafe charset = iota
	// idSafe is the set of a user id, a name and any other value taken
	// from the request: the unreserved characters of RFC 3986, and
	// "@:+=".
	idSafe
)

// idSafeLow and idSafeHigh are idSafe's bytes below 64 and from 64 to 127,
// as bit masks.
const (
	idSafeLow  = (1<<10-1)<<'0' | 1<<'-' | 1<<'.' | 1<<':' | 1<<'+' | 1<<'='
	idSafeHigh = (1<<26-1)<<('A'-64) | (1<<26-1)<<('a'-64) | 1<<('_'-64) | 1<<('~'-64) | 1<<('@'-64)
)

// safe reports whether b stands for itself in a key under cs.
func (cs charset) safe(b byte) bool {
	if cs == routeSafe {
		return b > ' ' && b < 0x7f && b != '%' && b != '{' && b != '}'
	}
	if b < 64 {
		return uint64(idSafeLow)>>b&1 != 0
	}
	return b < 128 && uint64(idSafeHigh)>>(b-64)&1 != 0
}

// scope is the part of a key that says what is limited: a request's method
// and route template, or the key given to Policy.Allow.
type scope struct {
	method string // "" for Policy.Allow
	route  string // the route template, or Allow's key
}

// The scope of a request that matched no route (a 404 or 405 an annotation
// given to Use sees): the client chooses its method and path, so neither
// goes into the key; every such request shares this one scope.
const (
	unmatchedMethod = "*"
	unmatchedRoute  = "unmatched"
)

// requestScope returns the scope of a request: its method and route
// template, or the fixed scope of an unmatched request.
func requestScope(c *gin.Context) scope {
	route := c.FullPath()
	if route == "" {
		return scope{method: unmatchedMethod, route: unmatchedRoute}
	}
	return scope{method: c.Request.Method, route: route}
}

// label is the scope as observers, logs and errors name it: "GET /x",
// "unmatched", or "Policy.Allow".
func (s scope) label() string {
	switch s.method {
	case "":
		return "Policy.Allow"
	case unmatchedMethod:
		return unmatchedRoute
	}
	return s.method + " " + s.route
}

// maxKeyText is the longest identity, or Policy.Allow key, that goes into a
// key as it is; a longer one goes in as a hash (see writeBounded), so that no
// input makes a key longer than its configuration and this.
const maxKeyText = 256

// writeBounded writes s escaped with safe or, when s is longer than
// maxKeyText, "%~" and 32 hex digits of its SHA-256: a long value keeps a
// bucket of its own, and its key a bounded length. No escaped text can
// spell that form, since escaping leaves a '%' only before two hex digits.
func writeBounded(b *strings.Builder, s string, safe charset) {
	if len(s) <= maxKeyText {
		writeEscaped(b, s, safe)
		return
	}
	sum := sha256.Sum256([]byte(s))
	b.WriteString("%~")
	var h [32]byte
	hex.Encode(h[:], sum[:16])
	b.Write(h[:])
}

// boundedLen is the length writeBounded writes for s.
func boundedLen(s string, safe charset) int {
	if len(s) > maxKeyText {
		return 34
	}
	return escapedLen(s, safe)
}

// buildKey returns rule r's Redis key for scope s and identity w (nil for
// none). named says whether the route declares its rules with Rule, whose
// keys carry the rule's name outside the hash tag.
func buildKey(r *ruleBase, named bool, s scope, w *who) string {
	var parts []part
	if w != nil {
		parts = w.parts[:w.n]
	}
	n := len(r.prefix) + len(s.method) + boundedLen(s.route, routeSafe) + 3
	for _, p := range parts {
		n += 2 + len(p.label) + boundedLen(p.value, p.safe)
	}
	if named {
		n += len(" rule:") + len(r.escapedName)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(r.prefix)
	b.WriteByte('{')
	if s.method != "" {
		writeEscaped(&b, s.method, routeSafe)
		b.WriteByte(' ')
	}
	if s.method == "" { // Policy.Allow's key
		writeBounded(&b, s.route, routeSafe)
	} else {
		writeEscaped(&b, s.route, routeSafe)
	}
	if named {
		b.WriteString("} rule:")
		b.WriteString(r.escapedName)
	}
	for _, p := range parts {
		b.WriteByte(' ')
		b.WriteString(p.label)
		b.WriteByte(':')
		writeBounded(&b, p.value, p.safe)
	}
	if !named {
		b.WriteByte('}')
	}
	return b.String()
}

// escape returns s with every byte that safe rejects percent-encoded.
func escape(s string, safe charset) string {
	if escapedLen(s, safe) == len(s) {
		return s
	}
	var b strings.Builder
	writeEscaped(&b, s, safe)
	return b.String()
}

// escapedLen returns the length of s once escaped with safe.
func escapedLen(s string, safe charset) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !safe.safe(s[i]) {
			n += 2
		}
	}
	return n
}

// writeEscaped writes s to b, percent-encoding every byte that is not safe.
func writeEscaped(b *strings.Builder, s string, safe charset) {
	start := 0
	for i := 0; i < len(s); i++ {
		if safe.safe(s[i]) {
			continue
		}
		b.WriteString(s[start:i])
		b.WriteByte('%')
		b.WriteByte(hexDigits[s[i]>>4])
		b.WriteByte(hexDigits[s[i]&0xf])
		start = i + 1
	}
	b.WriteString(s[start:])
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// defaultName derives a rule name from a key prefix: "coupon:claim:" gives
// "coupon:claim". Bytes that are not printable ASCII become '_'.
func defaultName(prefix string) string {
	name := strings.TrimRight(prefix, ":")
	if name == "" {
		return "default"
	}
	b := []byte(name)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '_'
		}
	}
	return string(b)
}

// unsafeString views b as a string without copying. The caller must not
// modify b while the string is in use.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
