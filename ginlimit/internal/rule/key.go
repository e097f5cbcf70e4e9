package rule

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
// BuildKey:
//
//	<prefix>{<scope>[ <dimension>]}                 a route with one rule
//	<prefix>{<scope>} rule:<name>[ <dimension>]     a route with Rules
//	<prefix>{* shared} rule:<name>[ <dimension>]    a Shared rule
//
// The scope is "<METHOD> <route template>" for a request ("* unmatched"
// for one that matched no route), or the caller's key for Policy.Allow.
// A Shared rule's key has no route in it, so every route that carries the
// rule meets the same key; it always names the rule, so a rule declared
// alone and one declared with Rule share when their Key and Name agree.
// Its hash tag is the same for every Shared rule, so the Shared rules of
// one route (whose script call needs one slot) are always together, and a
// Redis Cluster keeps every Shared count on one node, as it keeps every
// count of one route with Rules. No route template can spell "* shared":
// gin's begin with '/'.
// The dimension is one " <label>:<value>" per dimension the rule counts per
// (Per), in the rule's order: "ip:<addr>", "user:<id>", "anon:<addr>",
// "p.<param>:<value>", "h.<header>:<value>", "f.<name>:<value>"; with
// HashIdentities, one "<labels joined by +>:<hmac>". The braces are the Redis Cluster hash tag: the keys of one
// route's Rules share a slot, so one script can decide them together. The
// scope and the identity are escaped: '%', '{', '}', spaces and
// non-printable bytes become %XX, and user ids and the other values taken
// from the request keep only unreserved characters, so no identity can spell another identity's key and nothing
// can close the hash tag early. IP addresses are canonical netip text. An
// identity value or Allow key longer than MaxKeyText goes in as a hash, so
// a key is never longer than its configuration allows.
//
// The prefix ends with the tags of the rule's kind, built here too: the
// algorithm's (Algorithm.Tag), so that two algorithms, or two shapes of one
// algorithm's data, never share a key; "if:" for an in-flight rule
// (SlotTag), "ban:" for a Ban (banTag) and "tier=<plan>:" for a plan of
// LimitBy (planTag), so that no two kinds or plans share a key either.
// The plan's tag is a code, not a word: "tier=" is what the keys of
// plans have always held, and another text would start every plan's
// count afresh on a rolling deploy.
//
// The identity is found here as well (Identify for a request, TargetWho
// for a Target), so that what a key says and how it is read from a
// request or a Target live side by side.

const (
	// RouteSafe is the scope's set (and a hashed identity's): printable
	// ASCII but space, '%', '{' and '}'.
	RouteSafe Charset = iota
	// IDSafe is the set of a user id, a name and any other value taken
	// from the request: the unreserved characters of RFC 3986, and
	// "@:+=".
	IDSafe
)

const hexDigits = "0123456789ABCDEF"

// charset says which bytes of a text stand for themselves in a key; the
// others are percent-encoded. It is a value, not a func(byte) bool, so that
// the per-byte test is inlined: building a key tests every byte of its
// text, and a call through a func value per byte would dominate it.
type Charset uint8

// idSafeLow and idSafeHigh are idSafe's bytes below 64 and from 64 to 127,
// as bit masks.
const (
	idSafeLow  = (1<<10-1)<<'0' | 1<<'-' | 1<<'.' | 1<<':' | 1<<'+' | 1<<'='
	idSafeHigh = (1<<26-1)<<('A'-64) | (1<<26-1)<<('a'-64) | 1<<('_'-64) | 1<<('~'-64) | 1<<('@'-64)
)

// Safe reports whether b stands for itself in a key under cs.
func (cs Charset) Safe(b byte) bool {
	if cs == RouteSafe {
		return b > ' ' && b < 0x7f && b != '%' && b != '{' && b != '}'
	}
	if b < 64 {
		return uint64(idSafeLow)>>b&1 != 0
	}
	return b < 128 && uint64(idSafeHigh)>>(b-64)&1 != 0
}

// scope is the part of a key that says what is limited: a request's method
// and route template, or the key given to Policy.Allow.
type Scope struct {
	Method string // "" for Policy.Allow
	Route  string // the route template, or Allow's key
}

// The scope of a request that matched no route (a 404 or 405 an annotation
// given to Use sees): the client chooses its method and path, so neither
// goes into the key; every such request shares this one scope.
const (
	UnmatchedMethod = "*"
	UnmatchedRoute  = "unmatched"
)

// sharedRoute is, under unmatchedMethod, the scope of every key of a
// Shared rule, whatever the route: what makes the count the group's.
const SharedRoute = "shared"

// label is the scope as observers, logs and errors name it: "GET /x",
// "unmatched", or "Policy.Allow".
func (s Scope) Label() string {
	switch s.Method {
	case "":
		return "Policy.Allow"
	case UnmatchedMethod:
		return UnmatchedRoute
	}
	return s.Method + " " + s.Route
}

// maxKeyText is the longest identity, or Policy.Allow key, that goes into a
// key as it is; a longer one goes in as a hash (see writeBounded), so that no
// input makes a key longer than its configuration and this.
const MaxKeyText = 256

// writeBounded writes s escaped with safe or, when s is longer than
// maxKeyText, "%~" and 32 hex digits of its SHA-256: a long value keeps a
// bucket of its own, and its key a bounded length. No escaped text can
// spell that form, since escaping leaves a '%' only before two hex digits.
func writeBounded(b *strings.Builder, s string, safe Charset) {
	if len(s) <= MaxKeyText {
		WriteEscaped(b, s, safe)
		return
	}
	sum := sha256.Sum256([]byte(s))
	b.WriteString("%~")
	var h [32]byte
	hex.Encode(h[:], sum[:16])
	b.Write(h[:])
}

// boundedLen is the length writeBounded writes for s.
func boundedLen(s string, safe Charset) int {
	if len(s) > MaxKeyText {
		return 34
	}
	return escapedLen(s, safe)
}

// BuildKey returns rule r's Redis key for scope s and identity w (nil for
// none). named says whether the route declares its rules with Rule, whose
// keys carry the rule's name outside the hash tag; a Shared rule's always
// do, under the scope "* shared" (sharedRoute).
func BuildKey(r *Base, named bool, s Scope, w *Who) string {
	if r.Shared && s.Method != "" { // Policy.Allow's key stays the whole identity
		s, named = Scope{Method: UnmatchedMethod, Route: SharedRoute}, true
	}
	var parts []Part
	if w != nil {
		parts = w.Parts[:w.N]
	}
	n := len(r.Prefix) + len(s.Method) + boundedLen(s.Route, RouteSafe) + 3
	for _, p := range parts {
		n += 2 + len(p.Label) + boundedLen(p.Value, p.Set)
	}
	if named {
		n += len(" rule:") + len(r.EscapedName)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(r.Prefix)
	b.WriteByte('{')
	if s.Method != "" {
		WriteEscaped(&b, s.Method, RouteSafe)
		b.WriteByte(' ')
	}
	if s.Method == "" { // Policy.Allow's key
		writeBounded(&b, s.Route, RouteSafe)
	} else {
		WriteEscaped(&b, s.Route, RouteSafe)
	}
	if named {
		b.WriteString("} rule:")
		b.WriteString(r.EscapedName)
	}
	for _, p := range parts {
		b.WriteByte(' ')
		b.WriteString(p.Label)
		b.WriteByte(':')
		writeBounded(&b, p.Value, p.Set)
	}
	if !named {
		b.WriteByte('}')
	}
	return b.String()
}

// hashHex is the length of a hashed identity in a key: 128 bits in hex.
const HashHex = 32

// Escape returns s with every byte that safe rejects percent-encoded.
func Escape(s string, safe Charset) string {
	if escapedLen(s, safe) == len(s) {
		return s
	}
	var b strings.Builder
	WriteEscaped(&b, s, safe)
	return b.String()
}

// escapedLen returns the length of s once escaped with safe.
func escapedLen(s string, safe Charset) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !safe.Safe(s[i]) {
			n += 2
		}
	}
	return n
}

// WriteEscaped writes s to b, percent-encoding every byte that is not safe.
func WriteEscaped(b *strings.Builder, s string, safe Charset) {
	start := 0
	for i := 0; i < len(s); i++ {
		if safe.Safe(s[i]) {
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

func PrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// defaultName derives a rule name from a key prefix: "coupon:claim:" gives
// "coupon:claim". Bytes that are not printable ASCII become '_'.
func DefaultName(prefix string) string {
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
func UnsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// who is the identity part of a request's key: one part per dimension of
// the rule (none for a whole-route rule), each a label ("user", "ip",
// "anon", "p.id", ...), its value, and which bytes of the value stand for
// themselves in a key. The text of an IP address is appended to text, which
// the caller may point at memory of its own (a request's), so that no
// allocation is needed for it: a who then lives on the caller's stack (it
// must not hold its own buffer: a value pointing into the struct that holds
// it sends the struct to the heap).
type Who struct {
	Parts [MaxDims]Part
	N     int
	Text  []byte
}

type Part struct {
	Label, Value string
	Set          Charset
}

func (w *Who) Add(label, value string, safe Charset) {
	w.Parts[w.N] = Part{label, value, safe}
	w.N++
}

// hash returns the hex HMAC of w's parts, cut to 128 bits. For one part it
// is the HMAC of " <label>:" and the value, as ginlimit has always keyed it;
// several parts each write their value's length before it, so that no
// value can move the boundary between two (A="x h.b:y", B="z" and A="x",
// B="y h.b:z" stay apart).
func (w *Who) hash(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	for _, p := range w.Parts[:w.N] {
		m.Write([]byte(" " + p.Label + ":"))
		if w.N > 1 {
			m.Write(strconv.AppendInt(nil, int64(len(p.Value)), 10))
			m.Write([]byte{':'})
		}
		m.Write([]byte(p.Value))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:16])
}

// logTag is what a log line may say about the identity of a request: the
// first 12 hex digits of the HMAC that HashIdentities puts into the key,
// keyed with the rule's secret or, without one, with the policy's own
// random secret, so lines about one client can be told apart but no
// identity is written down.
func (w *Who) LogTag(r *Base, secret []byte) string {
	if w.N == 0 {
		return ""
	}
	if r.HashKey != nil {
		return w.Parts[0].Value[:12]
	}
	return w.hash(secret)[:12]
}

// SlidingLogTag is the sliding log's Tag. Its script is told where it
// starts in the key (the param, the length of the prefix before it), to
// find the key the ZSET log kept: the same without it.
const SlidingLogTag = "sl2:"

// zsetKey is the key under which the sliding log's version before kept
// the count that r keeps under key (key without SlidingLogTag).
func ZsetKey(r *Base, key string) string {
	n := len(r.Prefix) - len(SlidingLogTag)
	return key[:n] + key[len(r.Prefix):]
}

// slotTag is what an in-flight rule adds to its key prefix, so that its
// keys never meet a rate rule's (see Algorithm.Tag).
const SlotTag = "if:"

// banTag is what a rule's Ban adds to the rule's prefix.
const banTag = "ban:"

// planTag is what a plan of LimitBy adds to its rule's prefix: its name,
// escaped, so that two plans never share counts.
func planTag(name string) string { return "tier=" + Escape(name, IDSafe) + ":" }

// partition is the partition of key, one of rule r's: the hex HMAC that
// HashIdentities puts in place of the identity, which every layout of
// BuildKey ends with (but for the closing brace of a route with one
// rule); "" for a rule that counts no dimension, or none hashed.
func (r *Base) Partition(key string) string {
	if r.HashKey == nil || len(r.Dims) == 0 {
		return ""
	}
	key = strings.TrimSuffix(key, "}")
	if len(key) < HashHex {
		return ""
	}
	return key[len(key)-HashHex:]
}

// KeyPair is r's key for scope s and identity w (nil for none), on a
// route whose keys name their rule when named (BuildKey), and its Ban's
// ("" for a rule without one).
func (r *Rate) KeyPair(named bool, s Scope, w *Who) (key, ban string) {
	key = BuildKey(&r.Base, named, s, w)
	if r.Ban != nil {
		ban = BuildKey(&r.Ban.Base, named, s, w)
	}
	return key, ban
}

// PlanFor returns the rule of the request's plan, or r: the first thing
// a request is counted by, before its identity and its key.
func (r *Rate) PlanFor(c *gin.Context) *Rate {
	if p := r.Plans[r.Pick(c)]; p != nil {
		return p
	}
	return r
}

// Key is the key of c's request for rule r on a route whose keys name
// their rule when named, in scope s: its identity found (Identify), w
// holding it, and its key built (BuildKey).
func (r *Base) Key(c *gin.Context, w *Who, named bool, s Scope) (string, error) {
	if err := r.Identify(c, w); err != nil {
		return "", err
	}
	return BuildKey(r, named, s, w), nil
}

// Identify finds the request's identity for rule r. With HashIdentities
// the text is an HMAC of the identity instead of the identity.
func (r *Base) Identify(c *gin.Context, w *Who) error {
	w.N, w.Text = 0, w.Text[:0]
	for _, d := range r.Dims {
		switch d.Kind {
		case KindIP:
			if err := r.clientIP(c, w, "ip"); err != nil {
				return err
			}
		case KindUser:
			uid, err := r.Users.UserID(c)
			switch {
			case err == nil:
				w.Add("user", uid, IDSafe)
			case r.AnonByIP && errors.Is(err, identity.ErrUnauthenticated):
				if err := r.clientIP(c, w, "anon"); err != nil {
					return err
				}
			default:
				return err
			}
		default:
			v, ok := d.value(c)
			if !ok || v == "" {
				return Missing{d}
			}
			w.Add(d.Label, v, IDSafe)
		}
	}
	r.Seal(w)
	return nil
}

// seal replaces w's identity by its HMAC when the rule has
// HashIdentities. Every identity goes through it on its way into a key:
// a request's (Identify) and a Target's. One dimension keeps its label
// ("user:<hex>"); several become one part, their labels joined by '+'.
func (r *Base) Seal(w *Who) {
	if r.HashKey == nil || w.N == 0 {
		return
	}
	label := w.Parts[0].Label
	for _, p := range w.Parts[1:w.N] {
		label += "+" + p.Label
	}
	w.Parts[0] = Part{label, w.hash(r.HashKey), RouteSafe}
	w.N = 1
}

// clientIP resolves the client's bucket and its text into w.
func (r *Base) clientIP(c *gin.Context, w *Who, label string) error {
	bucket, err := r.IPs.ClientBucket(c.Request)
	if err != nil {
		return err
	}
	ipWho(w, bucket, label)
	return nil
}

// ipWho adds to w the text that stands for an address in a key, under
// label, from its bucket (identity.IP.Bucket): an IPv4 address itself, an
// IPv6 address its bucket.
func ipWho(w *Who, bucket netip.Prefix, label string) {
	start := len(w.Text)
	if a := bucket.Addr(); a.Is4() {
		w.Text = a.AppendTo(w.Text)
	} else {
		w.Text = bucket.AppendTo(w.Text)
	}
	// Appending never rewrites bytes below len, and an append that moves
	// the text leaves the earlier parts on the old array, still theirs.
	w.Add(label, UnsafeString(w.Text[start:]), RouteSafe)
}

// TargetWho sets w to the identity t names for rule r, as Identify would
// for a request from it. Every part of t must be used by the rule.
func (r *Base) TargetWho(w *Who, t Target) error {
	w.N, w.Text = 0, w.Text[:0]
	if t.Sealed != "" {
		return r.sealedWho(w, t)
	}
	usedUser, usedIP, usedValues := false, false, 0
	for _, d := range r.Dims {
		switch d.Kind {
		case KindIP:
			if !t.IP.IsValid() {
				return errors.New("it counts per IP: give Target.IP")
			}
			ipWho(w, r.IPs.Bucket(t.IP.Unmap()), "ip")
			usedIP = true
		case KindUser:
			switch {
			case t.User != "":
				w.Add("user", t.User, IDSafe)
				usedUser = true
			case r.AnonByIP && t.IP.IsValid() && !r.Counts(KindIP):
				ipWho(w, r.IPs.Bucket(t.IP.Unmap()), "anon")
				usedIP = true
			case r.AnonByIP:
				return errors.New("it counts per user: give Target.User, or Target.IP for anonymous callers (UserOrIP)")
			default:
				return errors.New("it counts per user: give Target.User")
			}
		default:
			v := t.Values[d.Name]
			if v == "" {
				return fmt.Errorf("it counts per %s: give Target.Values[%q]", d.Describe(), d.Name)
			}
			w.Add(d.Label, v, IDSafe)
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
	r.Seal(w)
	return nil
}

// Target is a count named from outside a request (a rule, a scope and an
// identity), as a Target of the
// public package names it.
type Target struct {
	Route, Key, Rule, Plan string // which rule, in which scope (see ParseScope)
	User                   string
	IP                     netip.Addr
	Values                 map[string]string
	// Sealed is a hashed identity as the rule's keys hold it
	// ("user:<32 hex digits>"), which names the whole identity.
	Sealed string
}

// sealedWho sets w to the hashed identity t names, once it is checked to
// be one of r's: its labels, then HashHex hex digits.
func (r *Base) sealedWho(w *Who, t Target) error {
	if r.HashKey == nil || len(r.Dims) == 0 {
		return errors.New("it keeps no hashed identities")
	}
	if t.User != "" || t.IP.IsValid() || len(t.Values) > 0 {
		return errors.New("a hashed identity names the whole identity")
	}
	labels := make([]string, len(r.Dims))
	for i, d := range r.Dims {
		labels[i] = d.Label
	}
	label, sum, _ := strings.Cut(t.Sealed, ":")
	anon := r.AnonByIP && len(r.Dims) == 1 && label == "anon"
	if _, err := hex.DecodeString(sum); err != nil || len(sum) != HashHex || (label != strings.Join(labels, "+") && !anon) {
		return errors.New("not a hashed identity of the rule")
	}
	w.Add(label, sum, RouteSafe)
	return nil
}

// Counts reports whether the rule counts per a dimension of kind k.
func (r *Base) Counts(k Kind) bool {
	for _, d := range r.Dims {
		if d.Kind == k {
			return true
		}
	}
	return false
}

// value returns a param, header or func dimension's value for c.
func (d Dim) value(c *gin.Context) (string, bool) {
	switch d.Kind {
	case KindParam:
		return c.Param(d.Name), true
	case KindHeader:
		return c.GetHeader(d.Name), true
	case KindFunc:
		return d.Fn(c)
	}
	return "", false
}
