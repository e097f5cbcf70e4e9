package ginlimit

// A request's identity text (built in req.buf, shared by its keys, its
// header values and its calls' log tags): the keys, debug lines' identity
// tags, Targets' keys and Policy.Allow keys it gives, byte for byte as
// recorded; the tag when debug is switched on mid-request; and concurrent
// requests that never share it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
)

// keysAndTagsDigest is the SHA-256 of keysAndTagsLines as an earlier,
// simpler implementation of keys and tags wrote them (bb2d903~2: a per-who
// 96-byte buffer, a copy of who per call, and func(byte) bool escaping),
// with two changes since. One error text was renamed: a Target missing the
// user of a UserOrIP rule is told "(UserOrIP)" where it was told the name
// of the option that preceded it, "(AnonymousByIP)". And the sliding log's
// keys gained the "sl2:" tag after the prefix (slidingLogTag), when its
// storage went from a sorted set to a string; a sorted list of keys that
// holds them may sort them elsewhere for it. Without the tag, every key and
// tag is the same, byte for byte (the digest before it was
// 6175ae5ede1fc2c2387335f556909717bdc70a1314e909cdd24c02dc0844b93e).
const keysAndTagsDigest = "95db4a6b2600de35bcf91555225bd429a1fb1a65a7fe30de7e641dab7c218746"

// TestKeysAndTagsMatchRecordedDigest: for 16 route configurations (IP,
// IPv6 buckets of /128 and /7, users, UserOrIP, several IP parts in
// one rule, params, headers, funcs, HashIdentities, Ban, plans, Rules,
// InFlight) and 856 requests (every single byte, random text of 1 to 1000
// bytes with '%', '{', '}', NUL, DEL, non-UTF-8), every key, every debug
// line's identity tag, every Target's keys and every Policy.Allow key is
// what the earlier implementation of keysAndTagsDigest produced, byte for
// byte.
func TestKeysAndTagsMatchRecordedDigest(t *testing.T) {
	lines := keysAndTagsLines(t)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	if got := hex.EncodeToString(sum[:]); got != keysAndTagsDigest {
		t.Fatalf("%d lines, digest %s, want %s (the recorded keys and tags)", len(lines), got, keysAndTagsDigest)
	}
}

// identityTags is a slog handler that keeps the identity attribute of each
// debug record ("-" for none), while level (when set) lets debug through.
// Other records are dropped untouched: a background loop's outage line (the
// heartbeat's, on a loaded machine) is no line about a request.
type identityTags struct {
	level *slog.LevelVar
	mu    sync.Mutex
	tags  []string
}

func (h *identityTags) Enabled(_ context.Context, l slog.Level) bool {
	return h.level == nil || l >= h.level.Level()
}
func (h *identityTags) Handle(_ context.Context, r slog.Record) error {
	if r.Level != slog.LevelDebug {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	tag := "-"
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "identity" {
			tag = a.Value.String()
		}
		return true
	})
	h.tags = append(h.tags, tag)
	return nil
}
func (h *identityTags) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *identityTags) WithGroup(string) slog.Handler      { return h }

type keysAndTagsInput struct {
	remote, uid, param, hdr, fv string
	hasUID                      bool
}

func keysAndTagsText(r *rand.Rand, n int) string {
	b := make([]byte, n)
	alpha := "aZ09-._~@:+=%{} /\x00\x7f\xff\xc3\xa9"
	for i := range b {
		if r.IntN(3) == 0 {
			b[i] = byte(r.IntN(256))
		} else {
			b[i] = alpha[r.IntN(len(alpha))]
		}
	}
	return string(b)
}

// keysAndTagsLines serves many requests through many route configurations and
// returns, per request, the keys prepare builds, the identity tag a debug
// line gives each call, the keys Policy.Peek/Reset address for the same
// identity (Target), and Policy.Allow keys.
func keysAndTagsLines(t *testing.T) []string {
	_, rc := newMini(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	users := UserIdentity(identity.FromContext("uid"))
	ip128, _ := identity.NewIP()
	ip128, _ = ip128.WithIPv6Prefix(128)
	ip7, _ := identity.NewIP("10.0.0.0/8")
	ip7, _ = ip7.WithIPv6Prefix(7)
	fx := ByFunc("f.x", func(c *gin.Context) (string, bool) { v := c.GetString("fv"); return v, v != "" })
	all := Per(User, ByParam("id"), ByHeader("X-K"), fx)
	configs := []struct {
		name string
		opts []Option
	}{
		{"ip", []Option{Type(IP)}},
		{"ip128", []Option{Type(IP), IPIdentity(ip128)}},
		{"ip7", []Option{Type(IP), IPIdentity(ip7)}},
		{"user", []Option{Type(User), users}},
		{"anon", []Option{Type(UserOrIP), users, IPIdentity(ip128)}},
		{"ipanon", []Option{Per(IP, UserOrIP), users, IPIdentity(ip128)}},
		{"ipanonhash", []Option{Per(IP, UserOrIP), users, IPIdentity(ip128), HashIdentities(secret)}},
		{"all", []Option{all, users}},
		{"allhash", []Option{all, users, HashIdentities(secret)}},
		{"ipparam", []Option{Per(IP, ByParam("id"), ByHeader("X-K")), IPIdentity(ip128)}},
		{"method", []Option{Type(Method)}},
		{"ban", []Option{Per(IP, UserOrIP), users, IPIdentity(ip128), Ban(3, time.Minute, time.Minute)}},
		{"banhash", []Option{Type(IP), IPIdentity(ip128), HashIdentities(secret), Ban(3, time.Minute, time.Minute)}},
		{"plans", []Option{Per(IP, UserOrIP), users, IPIdentity(ip128), Ban(3, time.Minute, time.Minute),
			LimitBy(func(c *gin.Context) string { return c.GetHeader("X-Plan") }, map[string]int{"p ró{}%": 5, "gold": 9})}},
		{"rules", []Option{
			Rule(Name("a"), Key("ka:"), Type(IP), IPIdentity(ip128), Ban(2, time.Minute, time.Minute)),
			Rule(Name("b{%}"), Key("kb:"), Per(IP, UserOrIP), users, IPIdentity(ip128)),
			Rule(Name("c"), Key("kc:"), Per(IP, ByParam("id"), fx), IPIdentity(ip7), HashIdentities(secret), Ban(2, time.Minute, time.Minute)),
			Rule(Name("d"), Key("kd:"), Per(UserOrIP, ByHeader("X-K")), users, IPIdentity(ip128)),
		}},
		{"inflight", []Option{
			Rule(Name("rate"), Key("kr:"), Per(IP, UserOrIP), users, IPIdentity(ip128)),
			Rule(Name("slots"), Key("ks:"), InFlight(3, time.Minute), Per(IP, UserOrIP, ByParam("id")), users, IPIdentity(ip128)),
			Rule(Name("slots2"), Key("ks2:"), InFlight(3, time.Minute), Type(IP), IPIdentity(ip7)),
		}},
	}
	remotes := []string{"192.0.2.1:1", "10.1.2.3:5", "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:1", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:2",
		"[::ffff:198.51.100.7]:3", "[fe80::1%eth0]:4", "[::1]:5", "255.255.255.255:6"}
	r := rand.New(rand.NewPCG(8, 8))
	var ins []keysAndTagsInput
	for i := range 600 {
		in := keysAndTagsInput{remote: remotes[i%len(remotes)], hasUID: i%5 != 0}
		lens := []int{1, 2, 5, 40, 255, 256, 257, 300, 1000}
		pick := func() string { return keysAndTagsText(r, lens[r.IntN(len(lens))]) }
		in.uid = pick()
		if len(in.uid) > 256 {
			in.uid = in.uid[:256]
		}
		in.param, in.hdr, in.fv = pick(), pick(), pick()
		if i%7 == 0 {
			in.hdr = ""
		}
		if i%11 == 0 {
			in.fv = ""
		}
		ins = append(ins, in)
	}
	for i := range 256 {
		ins = append(ins, keysAndTagsInput{remote: remotes[i%len(remotes)], hasUID: true, uid: string([]byte{byte(i)}), param: string([]byte{byte(i)}), hdr: "h" + string([]byte{byte(i)}), fv: string([]byte{byte(i), byte(i)})})
	}
	var lines []string
	for _, cfg := range configs {
		h := &identityTags{}
		p := mustPolicy(t, append([]Option{Redis(rc), Key("pre%:"), withLogger(slog.New(h))}, cfg.opts...)...)
		p.route.Secret = []byte("fixed secret")
		var cur keysAndTagsInput
		e := gin.New()
		e.Use(func(c *gin.Context) {
			if cur.hasUID {
				c.Set("uid", cur.uid)
			}
			if cur.fv != "" {
				c.Set("fv", cur.fv)
			}
			c.Params = gin.Params{{Key: "id", Value: cur.param}}
		})
		e.GET("/r/:id", func(c *gin.Context) {
			c.Params = gin.Params{{Key: "id", Value: cur.param}}
			// dump reports req once prepared (okp): its keys, then a line
			// per key, in the order of the keys (a Ban's before its rule's),
			// whose rule deciders names.
			dump := func(what string, slots bool) {
				keys, deciders, okp := decide.ProbeKeys(p.route, c, slots)
				lines = append(lines, fmt.Sprintf("%s %s ok=%v status=%d keys=%q", cfg.name, what, okp, c.Writer.Status(), keys))
				for _, r := range deciders {
					h.tags = nil
					decide.ProbeDebug(p.route, c, r, "x")
					lines = append(lines, fmt.Sprintf("  tag %q", h.tags))
				}
			}
			dump("rules", false)
			if len(p.route.Slots) > 0 {
				dump("slots", true)
			}
			c.Status(299)
		})
		for _, in := range ins {
			cur = in
			req := httptest.NewRequest(http.MethodGet, "/r/x", nil)
			req.RemoteAddr = in.remote
			if in.hdr != "" {
				req.Header["X-K"] = []string{in.hdr}
			}
			req.Header.Set("X-Plan", []string{"", "gold", "p ró{}%", "none"}[len(in.param)%4])
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			lines = append(lines, fmt.Sprintf("%s resp %d", cfg.name, w.Code))
			// Targets
			for _, rl := range p.route.Rules {
				tg := Target{Route: "GET /r/:id", Rule: rl.Name, Values: map[string]string{}}
				if in.hasUID {
					tg.User = in.uid
				}
				if ap, err := netip.ParseAddrPort(in.remote); err == nil {
					tg.IP = ap.Addr()
				}
				for _, d := range rl.Dims {
					switch d.Kind {
					case rule.KindParam:
						tg.Values["id"] = in.param
					case rule.KindHeader:
						tg.Values["X-K"] = in.hdr
					case rule.KindFunc:
						tg.Values["f.x"] = in.fv
					}
				}
				if !rl.Counts(rule.KindUser) {
					tg.User = ""
				}
				if !rl.Counts(rule.KindIP) && !rl.AnonByIP {
					tg.IP = netip.Addr{}
				}
				if rl.AnonByIP && tg.User != "" && !rl.Counts(rule.KindIP) {
					tg.IP = netip.Addr{}
				}
				_, keys, err := p.target(tg)
				slices.Sort(keys)
				lines = append(lines, fmt.Sprintf("  target %s %q %v", rl.Name, keys, err))
			}
		}
	}
	// Policy.Allow keys.
	p := mustPolicy(t, Redis(rc), Key("al%:"))
	for _, in := range ins {
		for _, k := range []string{in.uid, in.param, in.hdr, in.fv} {
			lines = append(lines, "allow "+fmt.Sprintf("%q", ruleKey(p, 0, k)))
		}
	}
	return lines
}

// TestDebugSwitchedOnMidRequestNamesIdentity: a logger switched to
// debug while a request is being decided (here by its CostFunc, after
// prepare) still gets the identity tag in the refusal's debug line. A tag
// computed in prepare, only when the logger wrote debug lines then, would
// give ["-" "<tag>"]; debug finds the identity again when it writes a
// line.
func TestDebugSwitchedOnMidRequestNamesIdentity(t *testing.T) {
	_, c := newMini(t)
	var level slog.LevelVar
	level.Set(slog.LevelInfo)
	h := &identityTags{level: &level}
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Limit(1), Type(IP), withLogger(slog.New(h)),
		Cost(func(*gin.Context) int { level.Set(slog.LevelDebug); return 1 }))
	e := gin.New()
	e.GET("/x", p.route.Serve, ok)
	hdr := map[string]string{"RemoteAddr": "192.0.2.55:1"}
	for i, want := range []int{200, 429, 429} {
		if i < 2 {
			level.Set(slog.LevelInfo) // switched on by the CostFunc, mid-request
		}
		decide.ProbeQuiet(p.route) // one line per refusal
		if w := do(e, http.MethodGet, "/x", hdr); w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.tags) != 2 {
		t.Fatalf("debug lines %q, want one per refusal", h.tags)
	}
	// The second refusal was decided with debug on throughout.
	if h.tags[1] == "-" || h.tags[0] != h.tags[1] {
		t.Fatalf("debug lines' identity %q: a refusal decided while debug was switched on has no identity tag", h.tags)
	}
}

// TestConcurrentRulesBanInFlight: concurrent requests of distinct
// IPv6 clients, anonymous and not, on a route with Rules (a Ban, an
// UserOrIP rule whose two IP parts pass the 80 bytes of req.buf, a
// hashed rule) and two in-flight rules, with debug lines on: every key in
// Redis is one of the keys the identities must have, each client's are all
// there, and every answer's RateLimit header is well formed. Run with
// -race: each request's identity text and header values share req.buf.
func TestConcurrentRulesBanInFlight(t *testing.T) {
	m, c := newMini(t)
	ip128, _ := identity.NewIP()
	ip128, _ = ip128.WithIPv6Prefix(128)
	users := UserIdentity(identity.FromContext("uid"))
	h := &identityTags{}
	p := mustPolicy(t, Redis(c), withLogger(slog.New(h)),
		Rule(Name("a"), Key("ka:"), Limit(1000), Type(IP), IPIdentity(ip128), Ban(500, time.Minute, time.Minute)),
		Rule(Name("b"), Key("kb:"), Limit(1000), Per(IP, UserOrIP), users, IPIdentity(ip128)),
		Rule(Name("c"), Key("kc:"), Limit(3), Per(IP, ByParam("id")), IPIdentity(ip128), HashIdentities([]byte("0123456789abcdef0123456789abcdef"))),
		Rule(Name("s"), Key("ks:"), InFlight(100, time.Minute), Per(IP, UserOrIP), users, IPIdentity(ip128)),
		Rule(Name("t"), Key("kt:"), InFlight(100, time.Minute), Type(IP), IPIdentity(ip128)),
	)
	e := gin.New()
	e.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-Uid"); u != "" {
			c.Set("uid", u)
		}
	})
	e.GET("/r/:id", p.route.Serve, ok)
	const clients, times = 8, 12
	ipOf := func(g int) string { return fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%04x", 0xff00+g) }
	uidOf := func(g int) string {
		if g%2 == 0 {
			return "" // anonymous: "ip:<ip>/128 anon:<ip>/128", 86 bytes
		}
		return fmt.Sprintf("u{%d}%%", g)
	}
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			for i := range times {
				hdr := map[string]string{"RemoteAddr": "[" + ipOf(g) + "]:1"}
				if u := uidOf(g); u != "" {
					hdr["X-Uid"] = u
				}
				w := do(e, http.MethodGet, "/r/v"+fmt.Sprint(i%2), hdr)
				rl := w.Header().Get("RateLimit")
				every := strings.HasPrefix(rl, `"a";r=`) && strings.Count(rl, ";r=") == 3 &&
					strings.Contains(rl, `, "b";r=`) && strings.Contains(rl, `, "c";r=`)
				cached := w.Code == 429 && strings.HasPrefix(rl, `"c";r=0;t=`) // the deny cache's answer
				if w.Code != 200 && w.Code != 429 || !every && !cached {
					t.Errorf("client %d request %d: %d RateLimit %q", g, i, w.Code, rl)
				}
			}
		})
	}
	wg.Wait()
	want := map[string]bool{}
	for g := range clients {
		ip := ipOf(g) + "/128"
		want["ka:sl2:{GET /r/:id} rule:a ip:"+ip] = true
		if u := uidOf(g); u != "" {
			want["kb:sl2:{GET /r/:id} rule:b ip:"+ip+" user:"+rule.Escape(u, rule.IDSafe)] = true
		} else {
			want["kb:sl2:{GET /r/:id} rule:b ip:"+ip+" anon:"+ip] = true
		}
	}
	got := map[string]bool{}
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, "ka:sl2:{") || strings.HasPrefix(k, "kb:sl2:{") {
			got[k] = true
			if !want[k] {
				t.Errorf("unexpected key %q", k)
			}
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("missing key %q", k)
		}
	}
	// Rule c (3 per client and id) refused: the debug line names the
	// identity by its tag, never by the address.
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tag := range h.tags {
		if tag == "-" || strings.Contains(tag, "2001") {
			t.Errorf("debug line identity %q", tag)
		}
	}
}
