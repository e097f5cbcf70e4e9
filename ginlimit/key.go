package ginlimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"

	"github.com/gin-gonic/gin"
	"github.com/ginlimit/ginlimit/identity"
)

// The Redis key of one rule's count is built here, and only here, by
// buildKey:
//
//	<prefix>{<scope>[ <dimension>]}                 a route with one rule
//	<prefix>{<scope>} rule:<name>[ <dimension>]     a route with Rules
//	<prefix>{* shared} rule:<name>[ <dimension>]    a [Shared] rule
//
// The scope is "<METHOD> <route template>" for a request ("* unmatched"
// for one that matched no route), or the caller's key for [Policy.Allow].
// A Shared rule's key has no route in it, so every route that carries the
// rule meets the same key; it always names the rule, so a rule declared
// alone and one declared with Rule share when their Key and Name agree.
// Its hash tag is the same for every Shared rule, so the Shared rules of
// one route (whose script call needs one slot) are always together, and a
// Redis Cluster keeps every Shared count on one node, as it keeps every
// count of one route with Rules. No route template can spell "* shared":
// gin's begin with '/'.
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
// The prefix ends with the tags of the rule's kind, built here too: the
// algorithm's (keyTag), so that two algorithms, or two shapes of one
// algorithm's data, never share a key; "if:" for an in-flight rule
// (slotTag), "ban:" for a Ban (banTag) and "tier=<plan>:" for a plan of
// LimitBy (planTag), so that no two kinds or plans share a key either.
//
// The identity is found here as well (identify for a request, targetWho
// for a [Target]), so that what a key says and how it is read from a
// request or a Target live side by side.

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

// sharedRoute is, under unmatchedMethod, the scope of every key of a
// [Shared] rule, whatever the route: what makes the count the group's.
const sharedRoute = "shared"

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
// keys carry the rule's name outside the hash tag; a Shared rule's always
// do, under the scope "* shared" (sharedRoute).
func buildKey(r *ruleBase, named bool, s scope, w *who) string {
	if r.shared && s.method != "" { // Policy.Allow's key stays the whole identity
		s, named = scope{method: unmatchedMethod, route: sharedRoute}, true
	}
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

// partition is the partition of key, one of rule r's: the hex HMAC that
// [HashIdentities] puts in place of the identity, which every layout of
// buildKey ends with (but for the closing brace of a route with one
// rule); "" for a rule that counts no dimension, or none hashed.
func (r *ruleBase) partition(key string) string {
	if r.hashKey == nil || len(r.dims) == 0 {
		return ""
	}
	key = strings.TrimSuffix(key, "}")
	if len(key) < hashHex {
		return ""
	}
	return key[len(key)-hashHex:]
}

// hashHex is the length of a hashed identity in a key: 128 bits in hex.
const hashHex = 32

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

// who is the identity part of a request's key: one part per dimension of
// the rule (none for a whole-route rule), each a label ("user", "ip",
// "anon", "p.id", ...), its value, and which bytes of the value stand for
// themselves in a key. The text of an IP address is appended to text, which
// the caller may point at memory of its own (a request's), so that no
// allocation is needed for it: a who then lives on the caller's stack (it
// must not hold its own buffer: a value pointing into the struct that holds
// it sends the struct to the heap).
type who struct {
	parts [maxDims]part
	n     int
	text  []byte
}

type part struct {
	label, value string
	safe         charset
}

func (w *who) add(label, value string, safe charset) {
	w.parts[w.n] = part{label, value, safe}
	w.n++
}

// identify finds the request's identity for rule r. With HashIdentities
// the text is an HMAC of the identity instead of the identity.
func (r *ruleBase) identify(c *gin.Context, w *who) error {
	w.n, w.text = 0, w.text[:0]
	for _, d := range r.dims {
		switch d.kind {
		case dimIP:
			if err := r.clientIP(c, w, "ip"); err != nil {
				return err
			}
		case dimUser:
			uid, err := r.users.UserID(c)
			switch {
			case err == nil:
				w.add("user", uid, idSafe)
			case r.anonByIP && errors.Is(err, identity.ErrUnauthenticated):
				if err := r.clientIP(c, w, "anon"); err != nil {
					return err
				}
			default:
				return err
			}
		default:
			v, ok := d.value(c)
			if !ok || v == "" {
				return errMissing{d}
			}
			w.add(d.label, v, idSafe)
		}
	}
	r.seal(w)
	return nil
}

// value returns a param, header or func dimension's value for c.
func (d dim) value(c *gin.Context) (string, bool) {
	switch d.kind {
	case dimParam:
		return c.Param(d.name), true
	case dimHeader:
		return c.GetHeader(d.name), true
	case dimFunc:
		return d.fn(c)
	}
	return "", false
}

// seal replaces w's identity by its HMAC when the rule has
// [HashIdentities]. Every identity goes through it on its way into a key:
// a request's (identify) and a [Target]'s. One dimension keeps its label
// ("user:<hex>"); several become one part, their labels joined by '+'.
func (r *ruleBase) seal(w *who) {
	if r.hashKey == nil || w.n == 0 {
		return
	}
	label := w.parts[0].label
	for _, p := range w.parts[1:w.n] {
		label += "+" + p.label
	}
	w.parts[0] = part{label, w.hash(r.hashKey), routeSafe}
	w.n = 1
}

// hash returns the hex HMAC of w's parts, cut to 128 bits. For one part it
// is the HMAC of " <label>:" and the value, as ginlimit has always keyed it;
// several parts each write their value's length before it, so that no
// value can move the boundary between two (A="x h.b:y", B="z" and A="x",
// B="y h.b:z" stay apart).
func (w *who) hash(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	for _, p := range w.parts[:w.n] {
		m.Write([]byte(" " + p.label + ":"))
		if w.n > 1 {
			m.Write(strconv.AppendInt(nil, int64(len(p.value)), 10))
			m.Write([]byte{':'})
		}
		m.Write([]byte(p.value))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:16])
}

// clientIP resolves the client's address and its bucket text into w.
func (r *ruleBase) clientIP(c *gin.Context, w *who, label string) error {
	addr, err := r.ips.Resolve(c.Request)
	if err != nil {
		return err
	}
	r.ipWho(w, addr, label)
	return nil
}

// ipWho adds to w the text that stands for addr in a key, under label: an
// IPv4 address itself, an IPv6 address its bucket (see
// identity.IP.Bucket).
func (r *ruleBase) ipWho(w *who, addr netip.Addr, label string) {
	start := len(w.text)
	if addr.Is4() {
		w.text = addr.AppendTo(w.text)
	} else {
		w.text = r.ips.Bucket(addr).AppendTo(w.text)
	}
	// Appending never rewrites bytes below len, and an append that moves
	// the text leaves the earlier parts on the old array, still theirs.
	w.add(label, unsafeString(w.text[start:]), routeSafe)
}

// logTag is what a log line may say about the identity of a request: the
// first 12 hex digits of the HMAC that [HashIdentities] puts into the key,
// keyed with the rule's secret or, without one, with the policy's own
// random secret, so lines about one client can be told apart but no
// identity is written down.
func (w *who) logTag(r *ruleBase, secret []byte) string {
	if w.n == 0 {
		return ""
	}
	if r.hashKey != nil {
		return w.parts[0].value[:12]
	}
	return w.hash(secret)[:12]
}

// targetWho sets w to the identity t names for rule r, as identify would
// for a request from it. Every part of t must be used by the rule.
func (r *ruleBase) targetWho(w *who, t Target) error {
	w.n, w.text = 0, w.text[:0]
	if t.sealed != "" {
		return r.sealedWho(w, t)
	}
	usedUser, usedIP, usedValues := false, false, 0
	for _, d := range r.dims {
		switch d.kind {
		case dimIP:
			if !t.IP.IsValid() {
				return errors.New("it counts per IP: give Target.IP")
			}
			r.ipWho(w, t.IP.Unmap(), "ip")
			usedIP = true
		case dimUser:
			switch {
			case t.User != "":
				w.add("user", t.User, idSafe)
				usedUser = true
			case r.anonByIP && t.IP.IsValid() && !r.counts(dimIP):
				r.ipWho(w, t.IP.Unmap(), "anon")
				usedIP = true
			case r.anonByIP:
				return errors.New("it counts per user: give Target.User, or Target.IP for anonymous callers (UserOrIP)")
			default:
				return errors.New("it counts per user: give Target.User")
			}
		default:
			v := t.Values[d.name]
			if v == "" {
				return fmt.Errorf("it counts per %s: give Target.Values[%q]", d.describe(), d.name)
			}
			w.add(d.label, v, idSafe)
			usedValues++
		}
	}
	switch {
	case t.User != "" && !usedUser:
		return errors.New("it does not count per user: leave Target.User empty")
	case t.IP.IsValid() && !usedIP:
		return errors.New("it does not count per IP: leave Target.IP empty")
	case len(t.Values) != usedValues:
		return errors.New("Target.Values names a dimension the rule does not count per")
	}
	r.seal(w)
	return nil
}

// keyTag is what the algorithm adds to a rule's key prefix: the algorithm
// and what gives its stored data its shape. Only the sliding counter's
// shape depends on a setting, its sub-window length (its state is counted
// in sub-window numbers); the token bucket's state is its level, in tokens
// times the window, written with the limit and window it was written under
// (lua/token_bucket.lua), so a new limit or window (an override's) reads it
// on the same key and keeps what was spent (an override of the counter
// keeps its sub-window length: overrideWindow). So switching a live route
// to another algorithm, or configuring another sub-window length for the
// counter, starts on fresh keys: no script ever meets another's data (no
// WRONGTYPE) or misreads it. A new stored format that the older version's script cannot
// read takes a new tag too, so that during a rolling deploy each version
// keeps its own keys: "fw2:" for the fixed window's string, where the
// version before kept a hash under "fw:"; "sc-<sub-window µs>:" for the
// counter's string, where it kept a hash under "sc<sub-window µs>:" (each
// version would meet the other's key as WRONGTYPE); and "tb3:" for the
// bucket's state with its settings, where the versions before kept binary
// state in 1/limit µs under "tb-<limit>:" and text under "tb<limit>:" (an
// older script would read the new state as a full bucket). For the windows
// a deploy spans, old and new instances then count apart: up to twice the
// limit, never an error or an unbounded bypass; the older keys expire
// within a window of the last old instance. The sliding log's string is
// under "sl2:" (slidingLogTag), where its ZSET was under no tag; its script
// reads that ZSET too (lua/sliding_log.lua, Upgrade), so that a deploy
// keeps every count the older version wrote before it.
func (a AlgorithmKind) keyTag(r *ruleConfig) string {
	switch a {
	case SlidingLog:
		return slidingLogTag
	case SlidingCounter:
		return "sc-" + strconv.FormatInt(r.window.Microseconds()/int64(r.subWindows), 10) + ":"
	case FixedWindow:
		return "fw2:"
	case TokenBucket:
		return "tb3:"
	}
	return ""
}

// slidingLogTag is the sliding log's keyTag. Its script is told where it
// starts in the key (the param, the length of the prefix before it), to
// find the key the ZSET log kept: the same without it.
const slidingLogTag = "sl2:"

// zsetKey is the key under which the sliding log's version before kept
// the count that r keeps under key (key without slidingLogTag).
func zsetKey(r *ruleBase, key string) string {
	n := len(r.prefix) - len(slidingLogTag)
	return key[:n] + key[len(r.prefix):]
}

// slotTag is what an in-flight rule adds to its key prefix, so that its
// keys never meet a rate rule's (see keyTag).
const slotTag = "if:"

// banTag is what a rule's Ban adds to the rule's prefix.
const banTag = "ban:"

// planTag is what a plan of LimitBy adds to its rule's prefix: its name,
// escaped, so that two plans never share counts.
func planTag(name string) string { return "tier=" + escape(name, idSafe) + ":" }
