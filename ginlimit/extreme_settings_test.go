package ginlimit

// Settings at the edges of what ginlimit accepts at start-up, decided by a
// real redis-server.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/lua"
)

// TestTokenBucketAt2Pow53: settings ginlimit accepts at start-up
// (Window 2^24 µs, Limit 1, Burst 2^29: burst × window = 2^53, the bound
// validate allows) must not admit a request one µs before GCRA conforms
// it: the script's ahead + cost*window is then 2^53 + 1, which a double
// rounds to 2^53, the capacity, so one unit more than the bucket holds
// could pass.
func TestTokenBucketAt2Pow53(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	window := time.Duration(1<<24) * time.Microsecond
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Algorithm(TokenBucket), Window(window), Limit(1), Burst(1<<29), DenyCache(0))
	now := time.Now().Add(time.Minute).UnixMicro()
	p.route.Clock = func() int64 { return now }
	ctx := context.Background()
	if d, err := p.Allow(ctx, "k", 1<<29); err != nil || !d.Allowed {
		t.Fatalf("emptying the bucket: %+v, %v", d, err)
	}
	now += 1<<24 - 1 // a token is back at +2^24 µs
	d, err := p.Allow(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("1 µs before a token is back: allowed %v, retry %v; want rejected, retry 1µs", d.Allowed, d.RetryAfter)
	}
}

// TestExtremeSettings: settings at the edges of what ginlimit accepts
// at start-up, written into the script text, never make the script
// refuse a call: each rule admits its first request (of cost 1, and the
// most it can cost on a fresh key), then rejects once full when that is
// quick to reach, on a real redis-server with the Redis clock.
func TestExtremeSettings(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	maxW, maxLog := rule.MaxWindow, lua.MaxLogWindow*time.Microsecond // the sliding log's longest
	for i, opts := range [][]Option{
		{Window(time.Millisecond), Limit(1)},
		{Window(time.Millisecond), Limit(lua.MaxLogLimit)},
		{Window(maxLog), Limit(lua.MaxLogLimit)},
		{Window(maxLog), Limit(1)},
		{Window(time.Millisecond + time.Microsecond), Limit(7)},
		{Window(time.Millisecond), Limit(1e9), Algorithm(SlidingCounter), subWindows(1000)},
		{Window(maxW), Limit(1e9), Algorithm(SlidingCounter), subWindows(1000)},
		{Window(maxW), Limit(3), Algorithm(SlidingCounter), subWindows(1)},
		{Window(time.Millisecond + time.Microsecond), Limit(5), Algorithm(SlidingCounter), subWindows(7)},
		{Window(time.Millisecond), Limit(1e9), Algorithm(FixedWindow)},
		{Window(maxW), Limit(1e9), Algorithm(FixedWindow)},
		{Window(maxW), Limit(1), Algorithm(FixedWindow)},
		{Window(time.Millisecond), Limit(1e9), Algorithm(TokenBucket), Burst(1e9)},
		{Window(time.Millisecond), Limit(1), Algorithm(TokenBucket), Burst(1e9)},
		{Window(maxW), Limit(1), Algorithm(TokenBucket), Burst(9)},
		{Window(maxW), Limit(1e9), Algorithm(TokenBucket), Burst(9)},
		{Window(time.Duration(1<<33) * time.Microsecond), Limit(1e9), Algorithm(TokenBucket), Burst(1 << 20)},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := mustPolicy(t, append([]Option{Redis(c), Key(prefix(t)), DenyCache(0)}, opts...)...)
			r := p.route.Rules[0]
			for _, n := range []int{1, r.MaxCost - 1} {
				if n < 1 {
					continue
				}
				d, err := p.Allow(ctx, fmt.Sprint("k", n), n)
				if err != nil || !d.Allowed {
					t.Fatalf("settings %v, cost %d on a fresh key: %+v, %v", r.Settings, n, d, err)
				}
			}
			if r.MaxCost <= 10 && r.Settings[1].(int64) > 60e6 {
				for j := range r.MaxCost {
					if _, err := p.Allow(ctx, "full", 1); err != nil {
						t.Fatalf("settings %v, request %d: %v", r.Settings, j, err)
					}
				}
				d, err := p.Allow(ctx, "full", 1)
				if err != nil || d.Allowed || d.RetryAfter <= 0 {
					t.Fatalf("settings %v, full: %+v, %v; want rejected with a retry", r.Settings, d, err)
				}
			}
		})
	}
}
