package ginlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
)

// keyInput is what one request brings to its keys: a user id (set by the
// application's auth middleware), the path parameter id, the X-K header,
// the value of the function dimension f, and the client address.
type keyInput struct {
	uid, param, hdr, fv string
	ip                  netip.Addr
}

// fuzzAddr is the client address of fuzz bytes: 4 or 16 bytes are an
// address (an IPv4-mapped one included), anything else 192.0.2.1.
func fuzzAddr(b []byte) netip.Addr {
	if a, ok := netip.AddrFromSlice(b); ok {
		return a
	}
	return netip.AddrFrom4([4]byte{192, 0, 2, 1})
}

// keyInputKey carries a request's keyInput in its context to the route,
// and keysFoundKey the *keysFound the route fills, so that no state is
// shared between requests.
type (
	keyInputKey  struct{}
	keysFoundKey struct{}
)

// keyRoute is a gin engine serving GET /r/:id for one policy: the handler
// sets the request's identity as its input says and returns the keys
// prepare builds for it (nil when prepare answered the request instead).
type keyRoute struct {
	p *Policy
	e *gin.Engine
}

type keysFound struct{ keys []string }

func newKeyRoute(p *Policy) keyRoute {
	e := gin.New()
	e.GET("/r/:id", func(c *gin.Context) {
		in := c.Request.Context().Value(keyInputKey{}).(keyInput)
		out := c.Request.Context().Value(keysFoundKey{}).(*keysFound)
		c.Params = gin.Params{{Key: "id", Value: in.param}}
		c.Set("uid", in.uid)
		c.Set("fv", in.fv)
		if keys, _, ok := decide.ProbeKeys(p.route, c, false); ok {
			out.keys = slices.Clone(keys)
		}
	})
	return keyRoute{p: p, e: e}
}

// keys serves one request with in and returns its keys, nil if none.
func (k keyRoute) keys(in keyInput) []string {
	out := &keysFound{}
	ctx := context.WithValue(context.WithValue(context.Background(), keyInputKey{}, in), keysFoundKey{}, out)
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/r/x", nil)
	r.RemoteAddr = netip.AddrPortFrom(in.ip, 1234).String()
	r.Header["X-K"] = []string{in.hdr}
	k.e.ServeHTTP(httptest.NewRecorder(), r)
	return out.keys
}

// refEscape is the package documentation's escaping (Keys), written
// independently of key.go: values taken from the request keep letters,
// digits and -._~@:+=; every other byte is %XX. A value longer than 256
// bytes is "%~" and 32 hex digits of its SHA-256.
func refEscape(s string) string {
	if len(s) > 256 {
		sum := sha256.Sum256([]byte(s))
		return "%~" + hex.EncodeToString(sum[:16])
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~@:+=", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// refAllowKey is a Policy.Allow key's text: printable ASCII but space, '%',
// '{' and '}' stands for itself; longer than 256 bytes, it is hashed.
func refAllowKey(s string) string {
	if len(s) > 256 {
		sum := sha256.Sum256([]byte(s))
		return "%~" + hex.EncodeToString(sum[:16])
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c > ' ' && c < 0x7f && c != '%' && c != '{' && c != '}' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// bucketText is how a client address stands in a key: an IPv4 address
// itself, an IPv6 address its network of bits bits.
func bucketText(a netip.Addr, bits int) string {
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

// validUser reports whether FromContext accepts uid.
func validUser(uid string) bool { return uid != "" && len(uid) <= identity.MaxUserIDLen }

// keyCase is one route configuration: its policy, and, for an input, the
// keys the documentation says its request gets (nil when the request is
// answered without keys) and the identity they stand for (equal for two
// inputs exactly when they must share keys).
type keyCase struct {
	name     string
	route    keyRoute
	want     func(p *Policy, in keyInput) []string
	identity func(in keyInput) string
	target   func(in keyInput) Target // the Target naming the request's keys; nil: not checked
	hashed   *regexp.Regexp           // the whole key, when identities are hashed
}

// keyCases builds the route configurations the key fuzz target drives:
// every dimension in one rule, the same hashed, IP and parameter, and
// Rules with a ban, anonymous users by IP and IPv6 addresses counted alone.
func keyCases(f *testing.F) []keyCase {
	_, c := newMini(f)
	base := []Option{Redis(c), DenyCache(0), withLogger(slog.New(slog.DiscardHandler)), UserIdentity(identity.FromContext("uid"))}
	policy := func(opts ...Option) *Policy { return mustPolicy(f, append(slices.Clone(base), opts...)...) }
	fx := ByFunc("f", func(c *gin.Context) (string, bool) { v := c.GetString("fv"); return v, v != "" })
	every := Per(User, ByParam("id"), ByHeader("X-K"), fx)
	ip128, err := (&identity.IP{}).WithIPv6Prefix(128)
	if err != nil {
		f.Fatal(err)
	}
	all := func(in keyInput) string {
		return strconv.Quote(in.uid) + strconv.Quote(in.param) + strconv.Quote(in.hdr) + strconv.Quote(in.fv)
	}
	allValid := func(in keyInput) bool { return validUser(in.uid) && in.param != "" && in.hdr != "" && in.fv != "" }
	allTarget := func(in keyInput) Target {
		return Target{Route: "GET /r/:id", User: in.uid, Values: map[string]string{"id": in.param, "X-K": in.hdr, "f": in.fv}}
	}
	return []keyCase{
		{
			name:  "every dimension",
			route: newKeyRoute(policy(Key("k:"), every)),
			want: func(p *Policy, in keyInput) []string {
				if !allValid(in) {
					return nil
				}
				return []string{p.route.Rules[0].Prefix + "{GET /r/:id user:" + refEscape(in.uid) + " p.id:" + refEscape(in.param) +
					" h.x-k:" + refEscape(in.hdr) + " f.f:" + refEscape(in.fv) + "}"}
			},
			identity: all,
			target:   allTarget,
		},
		{
			name:  "every dimension, hashed",
			route: newKeyRoute(policy(Key("h:"), every, HashIdentities([]byte("0123456789abcdef0123456789abcdef")))),
			want: func(p *Policy, in keyInput) []string {
				if !allValid(in) {
					return nil
				}
				return []string{""} // its form is hashed: see keyCase.hashed
			},
			identity: all,
			target:   allTarget,
			hashed:   regexp.MustCompile(`^h:sl2:\{GET /r/:id user\+p\.id\+h\.x-k\+f\.f:[0-9a-f]{32}\}$`),
		},
		{
			name:  "IP and parameter",
			route: newKeyRoute(policy(Key("ip:"), Per(IP, ByParam("id")))),
			want: func(p *Policy, in keyInput) []string {
				if in.param == "" {
					return nil
				}
				return []string{p.route.Rules[0].Prefix + "{GET /r/:id ip:" + bucketText(in.ip, identity.DefaultIPv6Prefix) + " p.id:" + refEscape(in.param) + "}"}
			},
			identity: func(in keyInput) string {
				return bucketText(in.ip, identity.DefaultIPv6Prefix) + " " + strconv.Quote(in.param)
			},
			target: func(in keyInput) Target {
				return Target{Route: "GET /r/:id", IP: in.ip, Values: map[string]string{"id": in.param}}
			},
		},
		{
			name: "Rules, a ban, anonymous by IP",
			route: newKeyRoute(policy(
				Rule(Name("a b"), Key("ka:"), Per(UserOrIP, ByHeader("X-K")), Ban(3, time.Minute, time.Minute)),
				Rule(Name("b"), Key("kb:"), Type(IP), IPIdentity(ip128)))),
			want: func(p *Policy, in keyInput) []string {
				if in.hdr == "" {
					return nil
				}
				who := " anon:" + bucketText(in.ip, identity.DefaultIPv6Prefix)
				if validUser(in.uid) {
					who = " user:" + refEscape(in.uid)
				}
				a, b := p.route.Rules[0], p.route.Rules[1]
				return []string{
					a.Ban.Prefix + "{GET /r/:id} rule:a%20b" + who + " h.x-k:" + refEscape(in.hdr),
					a.Prefix + "{GET /r/:id} rule:a%20b" + who + " h.x-k:" + refEscape(in.hdr),
					b.Prefix + "{GET /r/:id} rule:b ip:" + bucketText(in.ip, 128),
				}
			},
			identity: func(in keyInput) string {
				who := "anon " + bucketText(in.ip, identity.DefaultIPv6Prefix)
				if validUser(in.uid) {
					who = "user " + strconv.Quote(in.uid)
				}
				return who + " " + strconv.Quote(in.hdr) + " " + bucketText(in.ip, 128)
			},
		},
		{
			name: "Shared, per user and header, and the whole group",
			route: newKeyRoute(policy(
				Rule(Name("g"), Key("sa:"), Per(Shared, User, ByHeader("X-K"))),
				Rule(Name("h"), Key("sb:"), Type(Shared)))),
			want: func(p *Policy, in keyInput) []string {
				if !validUser(in.uid) || in.hdr == "" {
					return nil
				}
				return []string{
					p.route.Rules[0].Prefix + "{* shared} rule:g user:" + refEscape(in.uid) + " h.x-k:" + refEscape(in.hdr),
					p.route.Rules[1].Prefix + "{* shared} rule:h",
				}
			},
			identity: func(in keyInput) string { return strconv.Quote(in.uid) + " " + strconv.Quote(in.hdr) },
		},
	}
}

// keyBound is the longest key rule r can build for scope s: its key
// without identity, and per dimension a space, the longest label ("anon"
// for a user), a colon and a value escaped at 3 bytes per byte of at most
// maxKeyText bytes (a longer one is hashed to 34).
func keyBound(r *rule.Base, named bool, s rule.Scope) int {
	n := len(rule.BuildKey(r, named, s, nil))
	for _, d := range r.Dims {
		n += 2 + max(len(d.Label), len("anon")) + 3*rule.MaxKeyText
	}
	return n
}

// checkKeyShape: a key is printable ASCII, holds one hash tag, and is no
// longer than its rule's configuration allows.
func checkKeyShape(t *testing.T, p *Policy, key string) {
	t.Helper()
	bound := 0
	for _, r := range p.route.Rules {
		bound = max(bound, keyBound(&r.Base, p.route.Named, rule.Scope{Method: http.MethodGet, Route: "/r/:id"}))
		if r.Ban != nil {
			bound = max(bound, keyBound(&r.Ban.Base, p.route.Named, rule.Scope{Method: http.MethodGet, Route: "/r/:id"}))
		}
	}
	if len(key) > bound {
		t.Fatalf("key of %d bytes, longer than the configuration allows (%d): %.120q", len(key), bound, key)
	}
	if !rule.PrintableASCII(key) || strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || strings.Index(key, "{") > strings.Index(key, "}") {
		t.Fatalf("key %.200q is not printable ASCII with one hash tag", key)
	}
}

// FuzzKeys: the Redis keys two requests get, on routes counting per user,
// path parameter, header, function and IP (plain, hashed, and as Rules
// with a ban), and the keys Policy.Allow gets for two callers' keys.
//
//   - A request gets keys exactly when it brings every value its rule
//     counts per, and they are the documented form: escaped values, long
//     ones hashed; with HashIdentities the key holds no raw identity.
//   - No key is longer than its configuration allows, nor anything but
//     printable ASCII with one hash tag.
//   - Two requests share keys exactly when they bring the same identity:
//     different values never share a count, two IPv6 addresses in one
//     configured network always do.
//   - A Target naming the request's identity names the same keys; a bad
//     Target's error repeats no identity.
func FuzzKeys(f *testing.F) {
	cases := keyCases(f)
	_, c := newMini(f)
	allow := mustPolicy(f, Redis(c), Key("al:"), DenyCache(0))
	v4 := []byte{192, 0, 2, 1}
	v6 := netip.MustParseAddr("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff").AsSlice()
	v6b := netip.MustParseAddr("2001:db8:ffff:ffff::").AsSlice()
	mapped := netip.MustParseAddr("::ffff:198.51.100.7").AsSlice()
	long := strings.Repeat("k", rule.MaxKeyText+1)
	sum := sha256.Sum256([]byte(long))
	for _, s := range []struct {
		uidA, paramA, hdrA, fvA string
		ipA                     []byte
		uidB, paramB, hdrB, fvB string
		ipB                     []byte
	}{
		// TestPerKeys.
		{"alice", "7", "k 1", "acme", v4, "alice", "7", "k 1", "acme", v4},
		// TestPerValuesCannotForgeKeys: no value spells another's key.
		{"u", "p", "a ip:192.0.2.1", "f", v4, "u", "p", "a", "f", v4},
		{"u", "p", "a}", "f", v4, "u", "p", "a ip:192.0.2.1}", "f", v4},
		{"u", "p", strings.Repeat("z", 10_000), "f", v4, "u", "p", strings.Repeat("z", 9_999), "f", v4},
		// TestShortValueCannotSpellALongValuesHash.
		{"u", "p", long, "f", v4, "u", "p", "~" + hex.EncodeToString(sum[:16]), "f", v4},
		// TestHashedPartsStayApart, with this route's labels.
		{"u", "x h.x-k:y", "z", "f", v4, "u", "x", "y h.x-k:z", "f", v4},
		// TestCharsets: a value and its escaped text.
		{"a b{c}%d\x00é~", "p", "h", "f", v4, "a%20b%7Bc%7D%25d%00%C3%A9~", "p", "h", "f", v4},
		// The clients of TestKeysAndTagsMatchRecordedDigest: one IPv6 /64,
		// an IPv4-mapped address and its IPv4 address.
		{"u", "p", "h", "f", v6, "u", "p", "h", "f", v6b},
		{"", "p", "h", "f", mapped, "", "p", "h", "f", []byte{198, 51, 100, 7}},
		// TestFromContextRejects and Accepts: ids at and over the bound.
		{strings.Repeat("a", 256), "p", "h", "f", v4, strings.Repeat("a", 257), "p", "h", "f", v4},
		{" alice ", "p", "h", "f", v4, "alice", "p", "h", "f", v4},
		// TestKeyLengthIsBounded: two long values of their own.
		{"u", strings.Repeat("a", 100_000), "h", "f", v4, "u", strings.Repeat("a", 99_999) + "b", "h", "f", v4},
		// TestMissingDimensionValues: a header, a function value and a
		// parameter missing.
		{"u", "p", "", "f", v4, "u", "p", "h", "", v4},
		{"u", "", "h", "f", v4, "", "p", "h", "f", v6},
	} {
		f.Add(s.uidA, s.paramA, s.hdrA, s.fvA, s.ipA, s.uidB, s.paramB, s.hdrB, s.fvB, s.ipB)
	}
	f.Fuzz(func(t *testing.T, uidA, paramA, hdrA, fvA string, ipA []byte, uidB, paramB, hdrB, fvB string, ipB []byte) {
		a := keyInput{uidA, paramA, hdrA, fvA, fuzzAddr(ipA)}
		b := keyInput{uidB, paramB, hdrB, fvB, fuzzAddr(ipB)}
		for _, kc := range cases {
			keysA := checkRequestKeys(t, kc, a)
			keysB := checkRequestKeys(t, kc, b)
			if keysA == nil || keysB == nil {
				continue
			}
			same := kc.identity(a) == kc.identity(b)
			if same != slices.Equal(keysA, keysB) {
				t.Fatalf("%s: identities %q and %q (same: %v) got keys %q and %q", kc.name, kc.identity(a), kc.identity(b), same, keysA, keysB)
			}
		}
		checkAllowKeys(t, allow, uidA, uidB)
	})
}

// checkRequestKeys checks the keys kc's route gives in and returns them.
func checkRequestKeys(t *testing.T, kc keyCase, in keyInput) []string {
	t.Helper()
	p := kc.route.p
	got, want := kc.route.keys(in), kc.want(p, in)
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: input %+.80v: keys %q, want keys: %v", kc.name, in, got, want != nil)
	}
	if got == nil {
		return nil
	}
	for i, k := range got {
		checkKeyShape(t, p, k)
		switch {
		case kc.hashed != nil && !kc.hashed.MatchString(k):
			t.Fatalf("%s: key %.200q is not one hashed identity", kc.name, k)
		case kc.hashed == nil && k != want[i]:
			t.Fatalf("%s: key %d is %.200q, want %.200q", kc.name, i, k, want[i])
		}
	}
	if kc.target == nil {
		return got
	}
	tg := kc.target(in)
	if _, keys, err := p.target(tg); err != nil || !slices.Equal(keys, got) {
		t.Fatalf("%s: Target %+.80v: keys %q, %v; want the request's %q", kc.name, tg, keys, err, got)
	}
	// A Target naming a dimension the rule does not count per is refused,
	// and its error repeats none of the identity.
	tg.Values = map[string]string{"id": in.param, "X-K": in.hdr, "f": in.fv, "zz": in.hdr}
	_, _, err := p.target(tg)
	if err == nil {
		t.Fatalf("%s: Target with an unknown dimension accepted", kc.name)
	}
	for _, v := range []string{in.uid, in.param, in.hdr, in.fv} {
		if len(v) >= 8 && (strings.Contains(err.Error(), v) || strings.Contains(err.Error(), strconv.Quote(v))) {
			t.Fatalf("%s: Target error %q repeats the identity %q", kc.name, err, v)
		}
	}
	return got
}

// checkAllowKeys: Policy.Allow's keys are the caller's key escaped and
// bounded inside one hash tag, and two callers' keys share a Redis key
// exactly when they are equal.
func checkAllowKeys(t *testing.T, p *Policy, a, b string) {
	t.Helper()
	ka, kb := ruleKey(p, 0, a), ruleKey(p, 0, b)
	for _, c := range []struct{ key, k string }{{a, ka}, {b, kb}} {
		if want := p.route.Rules[0].Prefix + "{" + refAllowKey(c.key) + "}"; c.k != want {
			t.Fatalf("Allow(%.80q): key %.200q, want %.200q", c.key, c.k, want)
		}
		if len(c.k) > len(p.route.Rules[0].Prefix)+2+3*rule.MaxKeyText || !rule.PrintableASCII(c.k) || strings.Count(c.k, "{") != 1 || strings.Count(c.k, "}") != 1 {
			t.Fatalf("Allow(%.80q): key %.200q is not one bounded hash tag", c.key, c.k)
		}
	}
	if (a == b) != (ka == kb) {
		t.Fatalf("Allow(%.80q) and Allow(%.80q) got keys %.200q and %.200q", a, b, ka, kb)
	}
}
