package ginlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestUnmatchedRequestsChooseNoKeyText: an annotation given to Use also
// runs on requests that match no route (404, and 405 with
// HandleMethodNotAllowed). Their method and path are the client's choice,
// so none of it goes into the key: made-up methods, a megabyte-long method
// and random paths all share one bucket per client, with a short key.
func TestUnmatchedRequestsChooseNoKeyText(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(testLimit(Redis(c), Key(pre), Type(IP), Limit(3)))
	e.GET("/known", ok)
	huge := strings.Repeat("M", 1<<20)
	var codes []int
	for _, req := range []struct{ method, path string }{
		{"FOO", "/a"}, {"BAR", "/b"}, {huge, "/" + strings.Repeat("p", 4096)}, {http.MethodPost, "/known"}, {"BAZ", "/c"},
	} {
		r := httptest.NewRequest(http.MethodGet, req.path, nil)
		r.Method = req.method
		r.RemoteAddr = "192.0.2.7:1234"
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	// Three unmatched requests (404, 404, 404) fill the one bucket; the 405
	// and the 404 after it are limited.
	if want := []int{404, 404, 404, 429, 429}; !equalInts(codes, want) {
		t.Fatalf("codes %v, want %v: made-up methods and paths must share one bucket", codes, want)
	}
	keys := m.Keys()
	if len(keys) != 1 || keys[0] != pre+"sl2:{* unmatched ip:192.0.2.7}" {
		t.Fatalf("keys %q, want the one fixed unmatched key", keys)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// longID is a user identity that returns whatever id it is given, however
// long: a custom resolver ginlimit does not control.
type longID string

func (l longID) UserID(*gin.Context) (string, error) { return string(l), nil }

// TestKeyLengthIsBounded: an identity or Policy.Allow key longer than 256
// bytes goes into the key as a hash, so the key's length is bounded by the
// configuration, and two long identities still have buckets of their own.
func TestKeyLengthIsBounded(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	for _, id := range []string{strings.Repeat("a", 100_000), strings.Repeat("a", 99_999) + "b"} {
		e := gin.New()
		e.GET("/x", testLimit(Redis(c), Key(pre), Type(User), UserIdentity(longID(id)), Limit(1)), ok)
		for i, want := range []int{200, 429} {
			if got := do(e, http.MethodGet, "/x", nil).Code; got != want {
				t.Fatalf("request %d: %d, want %d (each long id its own bucket)", i, got, want)
			}
		}
	}
	p := mustPolicy(t, Redis(c), Key(pre))
	if _, err := p.Allow(context.Background(), strings.Repeat("k", 1<<20), 1); err != nil {
		t.Fatal(err)
	}
	keys := ruleKeys(m)
	if len(keys) != 3 {
		t.Fatalf("keys %q, want 3", keys)
	}
	for _, k := range keys {
		if len(k) > len(pre)+64 {
			t.Fatalf("key of %d bytes: %.80q...", len(k), k)
		}
	}
}

// TestImpossibleConfigurationRefusedAtStart: a rule the script would refuse
// on every request (and that would then fail open on every request under
// FailOpen) is refused by New and RateLimit, naming the options.
func TestImpossibleConfigurationRefusedAtStart(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	for _, opts := range [][]Option{
		{Algorithm(TokenBucket), Limit(10_000), Window(30 * 24 * time.Hour)},
		{Algorithm(TokenBucket), Limit(1_000_000), Window(24 * time.Hour)},
		{Algorithm(TokenBucket), Limit(1_000_000_000)},
		{Algorithm(TokenBucket), Limit(10), Burst(1_000_000_000), Window(time.Hour)},
		{Rule(Name("a"), Algorithm(TokenBucket), Limit(1_000_000_000))},
	} {
		_, err := New(append([]Option{Redis(c)}, opts...)...)
		if err == nil || !strings.Contains(err.Error(), "2^53") || !strings.Contains(err.Error(), "Window(") {
			t.Errorf("New(%d options): %v; want an error naming the window and the burst", len(opts), err)
		}
		if msg := panicMessage(func() { l, _ := New(Redis(c)); l.RateLimit(opts...) }); !strings.Contains(msg, "2^53") {
			t.Errorf("Limiter.RateLimit: panic %q", msg)
		}
	}
	// The largest bucket that fits still works.
	if _, err := New(Redis(c), Algorithm(TokenBucket), Limit(900_000), Window(10_000*time.Second)); err != nil {
		t.Fatalf("a bucket at the bound: %v", err)
	}
}

// TestSwitchingAlgorithmsNeverClashes: on a real redis-server, one route
// switched from algorithm to algorithm under the same Key (a redeploy)
// starts each on keys of its own: no script meets another's data, so no
// decision fails (no WRONGTYPE), and each counts exactly. A token bucket
// of another limit goes on from the bucket's level, on the same key.
func TestSwitchingAlgorithmsNeverClashes(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	pre := prefix(t)
	ctx := context.Background()
	for i, tc := range []struct {
		alg               AlgorithmKind
		limit, subs, want int
	}{
		{SlidingLog, 3, 10, 3}, {SlidingCounter, 3, 10, 3}, {FixedWindow, 3, 10, 3}, {TokenBucket, 3, 10, 3},
		{SlidingCounter, 3, 5, 3}, // the counter's data takes another shape
		{TokenBucket, 4, 10, 1},   // the bucket's level goes on: 3 of 4 taken
	} {
		p := mustPolicy(t, Redis(c), Key(pre), Window(time.Hour), Limit(tc.limit), Algorithm(tc.alg), subWindows(tc.subs),
			DenyCache(0), OnFailure(FailClosed))
		admitted := 0
		for range tc.limit + 2 {
			d, err := p.Allow(ctx, "k", 1)
			if err != nil {
				t.Fatalf("step %d, %v: %v", i, tc.alg, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != tc.want {
			t.Fatalf("step %d, %v: admitted %d, want %d", i, tc.alg, admitted, tc.want)
		}
	}
}

// TestCounterKeysOfThePreviousFormat: the sliding counter keeps its state in
// one string since the version that tags its keys "sc-<sub-window µs>:";
// the versions before kept a hash under "sc<sub-window µs>:". During a
// rolling deploy both run on one Redis: each counts on its own keys (the
// new one never meets a hash, the old one never a string: no WRONGTYPE),
// and the old hash is left to expire.
func TestCounterKeysOfThePreviousFormat(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	pre := prefix(t)
	ctx := context.Background()
	const limit = 3
	p := mustPolicy(t, Redis(c), Key(pre), Window(time.Hour), Limit(limit), Algorithm(SlidingCounter), subWindows(10),
		DenyCache(0), OnFailure(FailClosed))
	// The previous version's hash for the same identity, full: its fields
	// are sub-window numbers (6 minutes each).
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	oldKey := pre + "sc360000000:{k}"
	sub := strconv.FormatInt(now.UnixMicro()/360e6, 10)
	if err := c.HSet(ctx, oldKey, sub, limit).Err(); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range limit + 1 {
		d, err := p.Allow(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != limit {
		t.Fatalf("admitted %d, want %d: the new version counts on its own key", admitted, limit)
	}
	if got := c.HGetAll(ctx, oldKey).Val(); len(got) != 1 || got[sub] != strconv.Itoa(limit) {
		t.Fatalf("the previous version's hash became %v", got)
	}
	keys := c.Keys(ctx, pre+"*").Val()
	slices.Sort(keys)
	if want := []string{pre + "sc-360000000:{k}", oldKey}; !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if typ := c.Type(ctx, pre+"sc-360000000:{k}").Val(); typ != "string" {
		t.Fatalf("the counter's key is a %s, want a string", typ)
	}
}

// TestCharsets pins each charset to its definition, byte by byte: the bit
// masks of idSafe are easy to get wrong, and a byte that wrongly stands for
// itself could let one identity spell another's key.
func TestCharsets(t *testing.T) {
	for i := range 256 {
		b := byte(i)
		wantRoute := b > ' ' && b < 0x7f && b != '%' && b != '{' && b != '}'
		wantID := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			b != 0 && strings.IndexByte("-._~@:+=", b) >= 0
		if got := rule.RouteSafe.Safe(b); got != wantRoute {
			t.Errorf("routeSafe.Safe(%#x) = %v, want %v", b, got, wantRoute)
		}
		if got := rule.IDSafe.Safe(b); got != wantID {
			t.Errorf("idSafe.Safe(%#x) = %v, want %v", b, got, wantID)
		}
	}
	if got, want := rule.Escape("a b{c}%d\x00é~", rule.IDSafe), "a%20b%7Bc%7D%25d%00%C3%A9~"; got != want {
		t.Errorf("escape(idSafe) = %q, want %q", got, want)
	}
	if got, want := rule.Escape("GET /a b/{x}%", rule.RouteSafe), "GET%20/a%20b/%7Bx%7D%25"; got != want {
		t.Errorf("escape(routeSafe) = %q, want %q", got, want)
	}
}

// TestUnmatchedOddMethodsAndPathsHold: made-up methods and paths of
// 64 KiB with spaces, braces and control bytes, on 404 and 405 requests
// seen by an annotation given to Use, all land in the fixed unmatched
// scope of one IP bucket: one short key, limit respected.
func TestUnmatchedOddMethodsAndPathsHold(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	l, err := New(Redis(c), Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(l.RateLimit(Key(prefix(t)), Type(IP), Window(time.Hour), Limit(3)))
	e.GET("/x/:id", ok)
	long := strings.Repeat("A{ }%\x01", 64<<10/6)
	admitted := 0
	for i, target := range []string{"/x/1", "/nowhere", "/x/1/" + url.PathEscape(long), "/" + url.PathEscape(long), "/x/1"} {
		for _, method := range []string{"FOO", "F{O}O", strings.Repeat("M", 64<<10)} {
			req := httptest.NewRequest(http.MethodGet, target, nil)
			req.Method = method
			req.RemoteAddr = "192.0.2.9:1"
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			if w.Code != http.StatusTooManyRequests {
				admitted++
			}
			_ = i
		}
	}
	if admitted != 3 {
		t.Fatalf("%d unmatched requests passed the limiter, want 3", admitted)
	}
	for _, k := range ruleKeys(m) {
		if len(k) > 100 || !strings.Contains(k, "{* unmatched ip:192.0.2.9}") {
			t.Fatalf("unexpected key %q", k)
		}
	}
}

// TestShortValueCannotSpellALongValuesHash: a value longer than maxKeyText
// goes into the key hashed. As "~" and 32 hex digits, a short value could
// spell it ('~' and hex digits stand for themselves in a key) and share the
// long value's count; the hashed form starts with a bare '%', which no
// escaped value contains, so this short value keeps a count of its own.
func TestShortValueCannotSpellALongValuesHash(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Limit(1), Per(ByHeader("X-Key"))), ok)
	long := strings.Repeat("k", rule.MaxKeyText+1)
	sum := sha256.Sum256([]byte(long))
	short := "~" + hex.EncodeToString(sum[:16])
	if w := do(e, http.MethodGet, "/x", map[string]string{"X-Key": long}); w.Code != http.StatusOK {
		t.Fatalf("the long value: %d", w.Code)
	}
	if w := do(e, http.MethodGet, "/x", map[string]string{"X-Key": short}); w.Code != http.StatusOK {
		t.Errorf("X-Key %q shares the count of a %d-byte value: %d, want 200", short, len(long), w.Code)
	}
}

// TestHashedPartsStayApart: with HashIdentities, several
// dimensions are sealed into one HMAC. Of " <label>:<value>" per part, with
// the values unescaped, A="x h.b:y", B="z" and A="x", B="y h.b:z" would
// hash alike and share one count; each value's length goes before it, so
// they stay apart.
func TestHashedPartsStayApart(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Limit(1), Per(ByHeader("A"), ByHeader("B")), HashIdentities(secret)), ok)
	if w := do(e, http.MethodGet, "/x", map[string]string{"A": "x h.b:y", "B": "z"}); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	if w := do(e, http.MethodGet, "/x", map[string]string{"A": "x", "B": "y h.b:z"}); w.Code != http.StatusOK {
		t.Errorf("A=\"x\" B=\"y h.b:z\" shares the count of A=\"x h.b:y\" B=\"z\": %d, want 200", w.Code)
	}
}
