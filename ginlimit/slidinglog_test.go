package ginlimit

import (
	"context"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
	"github.com/redis/go-redis/v9"
)

// step is one request in a timeline: at offset from t0, expect allowed or not
// and the remaining count and reset the decision reports.
type step struct {
	at        time.Duration
	allowed   bool
	remaining int
	reset     time.Duration
}

// runTimeline runs steps twice: without the deny cache, and with it on a
// local clock that moves with the Redis clock, where cached rejections must
// be exactly the decisions Redis would have made.
func runTimeline(t *testing.T, window time.Duration, limit int, steps []step) {
	t.Helper()
	for _, cache := range []int{0, 100} {
		runTimelineWith(t, window, limit, cache, steps)
	}
}

func runTimelineWith(t *testing.T, window time.Duration, limit, cache int, steps []step) {
	t.Helper()
	m, c := newMini(t)
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(window), Limit(limit), DenyCache(cache))
	var offset time.Duration
	if p.route.Rules[0].Deny != nil {
		p.route.Rules[0].Deny.SetClock(func() int64 { return int64(offset) })
	}
	ctx := context.Background()
	cached := 0
	defer func() {
		if cache > 0 && cached == 0 && !t.Failed() {
			t.Errorf("deny cache on: no decision came from it")
		}
	}()
	for i, s := range steps {
		m.SetTime(t0.Add(s.at))
		offset = s.at
		d, err := p.Allow(ctx, "k", 1)
		if err != nil {
			t.Fatalf("step %d (t0+%v): %v", i, s.at, err)
		}
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.Reset != s.reset {
			t.Fatalf("cache %d, step %d (t0+%v): got allowed=%v remaining=%d reset=%v, want allowed=%v remaining=%d reset=%v",
				cache, i, s.at, d.Allowed, d.Remaining, d.Reset, s.allowed, s.remaining, s.reset)
		}
		if d.Cached {
			cached++
		}
		if !d.Time.Equal(t0.Add(s.at)) {
			t.Fatalf("step %d: decision time %v, want the Redis clock %v", i, d.Time, t0.Add(s.at))
		}
		if want := time.Duration(0); !d.Allowed {
			want = d.Reset
			if d.RetryAfter != want {
				t.Fatalf("step %d: RetryAfter %v, want %v", i, d.RetryAfter, want)
			}
		} else if d.RetryAfter != want {
			t.Fatalf("step %d: RetryAfter %v on an allowed request", i, d.RetryAfter)
		}
	}
}

func TestSlidingLogWindowBoundary(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	runTimeline(t, time.Second, 2, []step{
		{0, true, 1, time.Second},
		{100 * ms, true, 0, 900 * ms},
		{500 * ms, false, 0, 500 * ms},
		// 1 ms before the oldest entry is a window old: still inside.
		{999 * ms, false, 0, 1 * ms},
		// Exactly a window old: it has left (the window is (now-w, now]).
		{1000 * ms, true, 0, 100 * ms},
		{1000 * ms, false, 0, 100 * ms},
		{1099 * ms, false, 0, 1 * ms},
		{1100 * ms, true, 0, 900 * ms},
	})
}

func TestSlidingLogRejectedRequestsAreNotRecorded(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	// If the rejections at 200..900 ms were recorded, the request at 1000 ms
	// would still be rejected.
	runTimeline(t, time.Second, 1, []step{
		{0, true, 0, time.Second},
		{200 * ms, false, 0, 800 * ms},
		{500 * ms, false, 0, 500 * ms},
		{900 * ms, false, 0, 100 * ms},
		{1000 * ms, true, 0, time.Second},
	})
}

// TestSlidingLog250msWindow: a sub-second window is kept to the
// microsecond, and the key expires at the end of the quarter of a window
// (aligned on the clock, in ms) its newest entry came in, plus the window:
// a window after that entry, or up to a quarter of a window later, so that
// the other admissions of that quarter need not set it again.
func TestSlidingLog250msWindow(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	const window = 250 * time.Millisecond
	p := mustPolicy(t, Redis(c), Key(pre), Window(window), Limit(1), DenyCache(0))
	ctx := context.Background()
	key := pre + rule.SlidingLogTag + "{k}"
	// expiry is the TTL at now of a key whose newest entry is at now (both
	// on a millisecond): quarter is the window's quarter in ms, rounded up.
	expiry := func(now time.Time) time.Duration {
		ms, quarter := now.UnixMilli(), int64(window/time.Millisecond+3)/4
		return time.Duration((ms/quarter+1)*quarter-ms)*time.Millisecond + window
	}
	if d, _ := p.Allow(ctx, "k", 1); !d.Allowed || d.Reset != window {
		t.Fatalf("first request: %+v", d)
	}
	if ttl := m.TTL(key); ttl != expiry(t0) || ttl <= window || ttl > window+63*time.Millisecond {
		t.Fatalf("TTL %v, want %v: the window (a sub-second one must not truncate to 0) to a quarter more", ttl, expiry(t0))
	}
	m.SetTime(t0.Add(249 * time.Millisecond))
	if d, _ := p.Allow(ctx, "k", 1); d.Allowed {
		t.Fatalf("at 249ms: allowed, want rejected")
	}
	now := t0.Add(window)
	m.SetTime(now)
	if d, _ := p.Allow(ctx, "k", 1); !d.Allowed {
		t.Fatalf("at 250ms: rejected, want allowed")
	}
	ttl := m.TTL(key)
	if ttl != expiry(now) {
		t.Fatalf("TTL %v after an admission at 250ms, want %v", ttl, expiry(now))
	}
	m.FastForward(ttl - time.Millisecond)
	if !m.Exists(key) {
		t.Fatalf("key %q expired before its TTL of %v", key, ttl)
	}
	m.FastForward(time.Millisecond)
	if m.Exists(key) {
		t.Fatalf("key %q still exists after its TTL of %v", key, ttl)
	}
}

func TestSlidingLogSameMicrosecondAllCounted(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	m.SetTime(t0.Add(time.Microsecond)) // off the millisecond: rounded up
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Minute), Limit(50))
	ctx := context.Background()
	allowed := 0
	for range 80 { // the clock never moves: all 80 in one microsecond
		d, err := p.Allow(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 50 {
		t.Fatalf("admitted %d, want 50", allowed)
	}
	k, err := readSlidingLog(ctx, c, ruleKey(p, 0, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if k.units() != 50 || len(k.entries) != 50 {
		t.Fatalf("the log holds %d units (%d entries), want 50", k.units(), len(k.entries))
	}
	for _, at := range k.entries {
		if want := t0.Add(time.Millisecond).UnixMicro(); at != want {
			t.Fatalf("an entry at %dµs, want %dµs: the microsecond rounded up to the millisecond", at, want)
		}
	}
}

func TestSlidingLogRejectsBadArguments(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	ctx := context.Background()
	// ARGV: clock, algorithm, window µs, limit, param, cost.
	for _, args := range [][]any{
		{"", 0, 999, 1, 0, 1}, {"", 0, 1000, 0, 0, 1}, {"", 0, "x", 1, 0, 1}, {"", 0, 1000, 1.5, 0, 1},
		{"", 0, 1000, "y", 0, 1}, {"", 0, 1000, 1, -1, 1}, {"", 0, 1000, 1, "z", 1}, {"", 0, 1000, 1, 0},
		{"", 0, 1000, 1, 0, 2}, {"", 0, 1000, 1, 0, 0}, {"", 1, 1000, 1, 0, 1}, {"x", 0, 1000, 1, 0, 1},
	} {
		err := redis.NewScript(lua.Several()).Run(ctx, c, []string{"k"}, args...).Err()
		if err == nil {
			t.Errorf("script accepted ARGV %v", args)
		}
	}
}

// TestSlidingLogResetAlwaysExact: remaining and reset are exact on every
// answer, far from the limit as near it and on rejection: reset is the time
// until the oldest entry, recorded at its admission's time rounded up to
// the millisecond, leaves the window.
func TestSlidingLogResetAlwaysExact(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	const limit = rule.ExactBelow + 2
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Second), Limit(limit), DenyCache(0))
	ctx := context.Background()
	// The first at 1µs is recorded at 1ms: it leaves the window at t0+1.001s.
	for i := range limit + 2 {
		at := time.Duration(i)*time.Millisecond + time.Microsecond
		m.SetTime(t0.Add(at))
		d, err := p.Allow(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		wantRemaining := max(0, limit-(i+1))
		if i >= limit {
			wantRemaining = 0
		}
		if want := time.Second + time.Millisecond - at; d.Reset != want || d.Remaining != wantRemaining || d.Allowed != (i < limit) {
			t.Fatalf("request %d at %v: allowed %v, remaining %d, reset %v; want %v, %d, %v", i, at, d.Allowed, d.Remaining, d.Reset, i < limit, wantRemaining, want)
		}
	}
}

// TestSlidingLogDeadEntries: a decision never removes anything (no sweep):
// entries that left the window stay in the key, uncounted, until an
// admission rewrites it, which it does once they are at least 64 and a
// quarter of the ones in the window; fewer stay. remaining and reset are
// exact all along.
func TestSlidingLogDeadEntries(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	const limit = 100
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Second), Limit(limit), DenyCache(0))
	ctx := context.Background()
	key := ruleKey(p, 0, "k")
	ms := time.Millisecond
	// check reads the key: entries in all, units from tail on.
	check := func(step string, entries, units int) {
		t.Helper()
		k, err := readSlidingLog(ctx, c, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(k.entries) != entries || k.units() != int64(units) {
			t.Fatalf("%s: the key holds %d entries, %d of them counted; want %d and %d", step, len(k.entries), k.units(), entries, units)
		}
	}
	// allow admits or rejects one request at t0+at and checks its answer.
	allow := func(at time.Duration, allowed bool, remaining int, reset time.Duration) {
		t.Helper()
		m.SetTime(t0.Add(at))
		d, err := p.Allow(ctx, "k", 1)
		if err != nil || d.Allowed != allowed || d.Remaining != remaining || d.Reset != reset {
			t.Fatalf("at %v: %+v, %v; want allowed %v, remaining %d, reset %v", at, d, err, allowed, remaining, reset)
		}
	}
	// 70 at 1µs (recorded at 1ms), 30 at 600.001ms (recorded at 601ms).
	for i := range 70 {
		allow(time.Microsecond, true, limit-1-i, time.Second+ms-time.Microsecond)
	}
	for i := range 30 {
		allow(600*ms+time.Microsecond, true, 29-i, 401*ms-time.Microsecond)
	}
	allow(600*ms+time.Microsecond, false, 0, 401*ms-time.Microsecond)
	check("full", 100, 100)
	// At 1001ms the 70 have left: a Peek and a rejection of cost 71 see
	// it, and write nothing.
	m.SetTime(t0.Add(1001 * ms))
	d, err := p.Peek(ctx, Target{Key: "k"})
	if err != nil || d.Remaining != 70 || d.Reset != 600*ms {
		t.Fatalf("Peek at 1001ms: %+v, %v; want remaining 70, reset 600ms", d, err)
	}
	if d, err := p.Allow(ctx, "k", 71); err != nil || d.Allowed || d.Remaining != 70 || d.RetryAfter != 600*ms {
		t.Fatalf("cost 71 at 1001ms: %+v, %v; want rejected, remaining 70, retry 600ms", d, err)
	}
	check("after a Peek and a rejection", 100, 100)
	// The admission finds 70 dead (at least 64, and a quarter of the 30):
	// it rewrites the key without them.
	allow(1001*ms, true, 69, 600*ms)
	check("after the admission that rewrites", 31, 31)
	// At 1601ms the 30 have left too, but they are fewer than 64: they
	// stay, uncounted.
	allow(1601*ms, true, 98, 400*ms)
	check("after 30 more left", 32, 2)
}
