package ginlimit

import (
	"context"
	"testing"
	"time"
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
	if p.rules[0].deny != nil {
		p.rules[0].deny.SetClock(func() int64 { return int64(offset) })
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

func TestSlidingLog250msWindow(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	p := mustPolicy(t, Redis(c), Key(pre), Window(250*time.Millisecond), Limit(1), DenyCache(0))
	ctx := context.Background()
	key := pre + "{k}"
	if d, _ := p.Allow(ctx, "k", 1); !d.Allowed || d.Reset != 250*time.Millisecond {
		t.Fatalf("first request: %+v", d)
	}
	if ttl := m.TTL(key); ttl != 250*time.Millisecond {
		t.Fatalf("TTL %v, want 250ms (a sub-second window must not truncate to 0)", ttl)
	}
	m.SetTime(t0.Add(249 * time.Millisecond))
	if d, _ := p.Allow(ctx, "k", 1); d.Allowed {
		t.Fatalf("at 249ms: allowed, want rejected")
	}
	m.SetTime(t0.Add(250 * time.Millisecond))
	if d, _ := p.Allow(ctx, "k", 1); !d.Allowed {
		t.Fatalf("at 250ms: rejected, want allowed")
	}
	// Once a key has entries, it expires at the end of the quarter of a
	// window an admission came in, plus the window: a window after its
	// newest entry, or up to a quarter of a window later (so the other
	// admissions of that quarter need not set it again).
	ttl := m.TTL(key)
	if ttl < 250*time.Millisecond || ttl > 250*time.Millisecond+250*time.Millisecond/4+time.Millisecond {
		t.Fatalf("TTL %v after an admission, want from the window (250ms) to a quarter more", ttl)
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
	pre := prefix(t)
	p := mustPolicy(t, Redis(c), Key(pre), Window(time.Minute), Limit(50))
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
	members, err := m.ZMembers(pre + "{k}")
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 50 {
		t.Fatalf("ZSET holds %d members, want 50 unique ones", len(members))
	}
}

func TestSlidingLogRejectsBadArguments(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	ctx := context.Background()
	// ARGV: clock, algorithm, window µs, limit, exact-below, cost.
	for _, args := range [][]any{
		{"", 0, 999, 1, 0, 1}, {"", 0, 1000, 0, 0, 1}, {"", 0, "x", 1, 0, 1}, {"", 0, 1000, 1.5, 0, 1},
		{"", 0, 1000, "y", 0, 1}, {"", 0, 1000, 1, -1, 1}, {"", 0, 1000, 1, "z", 1}, {"", 0, 1000, 1, 0},
		{"", 0, 1000, 1, 0, 2}, {"", 0, 1000, 1, 0, 0}, {"", 1, 1000, 1, 0, 1}, {"x", 0, 1000, 1, 0, 1},
	} {
		err := severalScript.Run(ctx, c, []string{"k"}, args...).Err()
		if err == nil {
			t.Errorf("script accepted ARGV %v", args)
		}
	}
}

// TestSlidingLogResetPrecision: with plenty of quota left the reset is the
// window (an upper bound, no ZRANGE); near the limit and on rejection it is
// exact.
func TestSlidingLogResetPrecision(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Window(time.Second), Limit(exactBelow+2), DenyCache(0))
	ctx := context.Background()
	for i := range exactBelow + 3 {
		m.SetTime(t0.Add(time.Duration(i) * time.Millisecond))
		d, err := p.Allow(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Second // remaining >= exactBelow: the window
		if d.Remaining < exactBelow || !d.Allowed {
			want = time.Second - time.Duration(i)*time.Millisecond // exact: the first entry leaves at t0+1s
		}
		if d.Reset != want {
			t.Fatalf("request %d (remaining %d, allowed %v): reset %v, want %v", i, d.Remaining, d.Allowed, d.Reset, want)
		}
	}
}

// TestSlidingLogLazyRemoval: with plenty of quota left, a request is
// admitted on the newest entry's bound alone, and entries that left the
// window may stay (remaining is then a lower bound); once the bound leaves
// fewer than exactBelow units, the units are counted exactly and the
// entries that left are removed.
func TestSlidingLogLazyRemoval(t *testing.T) {
	t.Parallel()
	m, c := newMini(t)
	pre := prefix(t)
	const limit = 200
	p := mustPolicy(t, Redis(c), Key(pre), Window(time.Second), Limit(limit), DenyCache(0))
	ctx := context.Background()
	// Odd microseconds keep the script off its one-in-sixteen exact count
	// and sweep.
	for _, at := range []time.Duration{time.Microsecond, 600*time.Millisecond + time.Microsecond} {
		m.SetTime(t0.Add(at))
		for range 30 {
			if d, err := p.Allow(ctx, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("%+v, %v", d, err)
			}
		}
	}
	m.SetTime(t0.Add(1200*time.Millisecond + time.Microsecond)) // the first 30 have left the window
	lazy, swept := 0, false
	for i := range 110 {
		d, err := p.Allow(ctx, "k", 1)
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		trueRemaining := limit - 30 - (i + 1)
		switch {
		case d.Remaining > trueRemaining:
			t.Fatalf("request %d: remaining %d exceeds the true %d", i, d.Remaining, trueRemaining)
		case d.Remaining < exactBelow && d.Remaining != trueRemaining:
			t.Fatalf("request %d: remaining %d below %d must be exact (%d)", i, d.Remaining, exactBelow, trueRemaining)
		case d.Remaining < trueRemaining:
			lazy++
		}
		n, _ := c.ZCard(ctx, pre+"{k}").Result()
		if n == int64(30+i+1) {
			swept = true
		} else if swept || n != int64(60+i+1) {
			t.Fatalf("request %d: the set holds %d entries, want %d before the sweep or %d after", i, n, 60+i+1, 30+i+1)
		}
	}
	if lazy == 0 || !swept {
		t.Fatalf("%d lower bounds, swept %v: want both", lazy, swept)
	}
}
