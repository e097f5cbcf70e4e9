package ginlimit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

func init() { gin.SetMode(gin.TestMode) }

// t0 is a fixed Redis clock for miniredis tests: 2026-01-02 03:04:05 UTC.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newMini starts a miniredis whose TIME is t0 and returns it with a client.
func newMini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

// prefix returns a random key prefix, so parallel tests never share keys.
func prefix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "test:" + hex.EncodeToString(b) + ":"
}

// do serves one request through the engine.
func do(e *gin.Engine, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if ra, ok := hdr["RemoteAddr"]; ok {
		req.RemoteAddr = ra
		req.Header.Del("RemoteAddr")
	}
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	return w
}

func ok(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) }

// testTimeout is the Timeout and QueueTimeout of the tests that check what
// Redis decided: a loaded CI machine (the race detector, parallel tests,
// busy loops) must never turn a late answer, or a long wait for a
// connection, into the failure policy's or the saturation answer. Tests of
// timeouts give their own after it.
const testTimeout = 5 * time.Second

func mustPolicy(t testing.TB, opts ...Option) *Policy {
	t.Helper()
	l, err := New(append([]Option{Timeout(testTimeout), queueTimeout(testTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testLimit is RateLimit with testTimeout first; tests of timeouts give
// their own Timeout after it.
func testLimit(opts ...Option) gin.HandlerFunc {
	return RateLimit(append([]Option{Timeout(testTimeout)}, opts...)...)
}

// heardOnce makes the count c of an instance's instances as if its
// heartbeat had answered once, keeping the count it has: for tests of the
// FailLocal fallback on a Redis that was never up, where a fresh instance
// would spend nothing.
func heardOnce(c *state.Instances) { c.Store(c.Load()) }

// ruleKey is the Redis key of rule i of p for Policy.Allow(ctx, key).
func ruleKey(p *Policy, i int, key string) string {
	return rule.BuildKey(&p.route.Rules[i].Base, p.route.Named, rule.Scope{Route: key}, nil)
}

// allowConcurrently calls allow from goroutines goroutines at once, times
// times each (g is the goroutine's number), and returns how many decisions
// admitted the request. An error fails t and ends that goroutine.
func allowConcurrently(t testing.TB, goroutines, times int, allow func(g int) (Decision, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range times {
				d, err := allow(g)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// fixedWindowCount returns the units a fixed window's key counts: its
// string is the window's start (7 bytes) then the count (4 bytes),
// unsigned big-endian (lua/fixed_window.lua).
func fixedWindowCount(t *testing.T, c redis.Cmdable, key string) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("fixed window key %s: %v", key, err)
	}
	if len(v) != 11 {
		t.Fatalf("fixed window key %s holds %q, want 11 bytes", key, v)
	}
	var n int64
	for _, b := range []byte(v[7:]) {
		n = n<<8 | int64(b)
	}
	return n
}

// logTrailer is the length of a sliding log key's trailer (see
// lua/sliding_log.lua): base (6 bytes), n (4), tail (4), newest (4), lcum
// (7), m (1), qi (1), first (4) and q (32).
const logTrailer = 63

// slidingLogKey is a sliding log's string as lua/sliding_log.lua documents
// it: each entry of its body as the time it was recorded at, in µs (dead
// ones included, oldest first), and tail, the index of the oldest entry
// that was in the window when the key was last written.
type slidingLogKey struct {
	entries []int64
	tail    int
}

// units is the units the key counted when it was last written: its
// entries from tail on.
func (k slidingLogKey) units() int64 { return int64(len(k.entries) - k.tail) }

// inWindow is the units of the key in a window of window µs at now (µs): an
// entry is in it while its time is after now - window.
func (k slidingLogKey) inWindow(now, window int64) int64 {
	var n int64
	for _, at := range k.entries {
		if at > now-window {
			n++
		}
	}
	return n
}

// readSlidingLog reads the sliding log key key, and checks that its parts
// agree: a body of 4-byte entries, as many as the trailer's n, in order,
// with tail within them, first tail's entry and the newest the trailer's.
// A missing key is an empty log; a key of another type is Redis's error
// (WRONGTYPE).
func readSlidingLog(ctx context.Context, c redis.Cmdable, key string) (slidingLogKey, error) {
	var k slidingLogKey
	s, err := c.Get(ctx, key).Result()
	if err == redis.Nil {
		return k, nil
	}
	if err != nil {
		return k, err
	}
	if len(s) < logTrailer || (len(s)-logTrailer)%4 != 0 {
		return k, fmt.Errorf("sliding log %s: %d bytes, not 4-byte entries and a trailer of %d", key, len(s), logTrailer)
	}
	be := func(b string) int64 {
		var x int64
		for i := range len(b) {
			x = x<<8 | int64(b[i])
		}
		return x
	}
	tr := s[len(s)-logTrailer:]
	base, n, tail, newest, first := be(tr[0:6]), be(tr[6:10]), be(tr[10:14]), be(tr[14:18]), be(tr[27:31])
	for i := 0; i < len(s)-logTrailer; i += 4 {
		k.entries = append(k.entries, (base+be(s[i:i+4]))*1000)
	}
	k.tail = int(tail)
	switch {
	case int64(len(k.entries)) != n:
		return k, fmt.Errorf("sliding log %s: %d entries, the trailer says %d", key, len(k.entries), n)
	case tail >= n:
		return k, fmt.Errorf("sliding log %s: tail %d of %d entries", key, tail, n)
	case k.entries[tail] != (base+first)*1000:
		return k, fmt.Errorf("sliding log %s: first %d is not tail's entry %d", key, base+first, k.entries[tail]/1000)
	case !slices.IsSorted(k.entries) || k.entries[n-1] != (base+newest)*1000:
		return k, fmt.Errorf("sliding log %s: entries %v out of order, or newest %d not the last", key, k.entries, base+newest)
	}
	return k, nil
}

// logUnits is the units the sliding log key key counted when it was last
// written (readSlidingLog, units): N for a key that admitted N units in one
// window.
func logUnits(ctx context.Context, c redis.Cmdable, key string) (int64, error) {
	k, err := readSlidingLog(ctx, c, key)
	return k.units(), err
}

// costOf is the fixed cost n: a Cost function that returns it.
func costOf(n int) RuleOption { return Cost(func(*gin.Context) int { return n }) }

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs: a
// Limiter's background calls (the fleet's upkeep) log from their own
// goroutines while a test reads what was written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}
