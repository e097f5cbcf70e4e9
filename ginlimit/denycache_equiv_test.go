package ginlimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/testtier"
)

// TestDenyCacheMatchesRedisForEveryAlgorithm drives one random timeline
// through two policies of each algorithm, one with the deny cache (on a
// local clock that moves with the Redis clock) and one without. Every
// decision must be the same: a cached answer is always the one Redis would
// give.
func TestDenyCacheMatchesRedisForEveryAlgorithm(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	for _, tc := range []struct {
		alg  AlgorithmKind
		opts []Option
	}{
		{SlidingLog, nil},
		{SlidingCounter, []Option{subWindows(4)}},
		{FixedWindow, nil},
		{TokenBucket, []Option{Burst(5)}},
		{TokenBucket, []Option{Burst(20)}},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			t.Parallel()
			_, c := newMini(t)
			const window, limit = 200 * time.Millisecond, 10
			base := []Option{Redis(c), Window(window), Limit(limit), Algorithm(tc.alg)}
			var now int64 = t0.UnixMicro()
			withCache := mustPolicy(t, append(append(base, Key(prefix(t)), DenyCache(100)), tc.opts...)...)
			without := mustPolicy(t, append(append(base, Key(prefix(t)), DenyCache(0)), tc.opts...)...)
			for _, p := range []*Policy{withCache, without} {
				p.route.Clock = func() int64 { return now }
			}
			withCache.route.Rules[0].Deny.SetClock(func() int64 { return (now - t0.UnixMicro()) * 1000 })
			seed := rand.Uint64()
			rng := rand.New(rand.NewPCG(seed, 1))
			cached := 0
			ctx := context.Background()
			for i := range 1500 {
				switch r := rng.IntN(10); {
				case r < 4: // same instant
				case r < 8:
					now += rng.Int64N(int64(window/time.Microsecond) / 20)
				default:
					now += rng.Int64N(int64(window/time.Microsecond) * 2)
				}
				cost := 1
				if rng.IntN(5) == 0 {
					cost = 1 + rng.IntN(4)
				}
				a, errA := withCache.Allow(ctx, "k", cost)
				b, errB := without.Allow(ctx, "k", cost)
				if errA != nil || errB != nil {
					t.Fatalf("seed %d step %d: %v / %v", seed, i, errA, errB)
				}
				if a.Cached {
					cached++
				}
				if a.Allowed != b.Allowed || a.RetryAfter > b.RetryAfter || (!a.Cached && (a.Remaining != b.Remaining || a.Reset != b.Reset)) {
					t.Fatalf("seed %d step %d (t+%dµs, cost %d): with cache %+v, without %+v", seed, i, now-t0.UnixMicro(), cost, a, b)
				}
			}
			if cached == 0 {
				t.Fatalf("seed %d: no decision came from the cache", seed)
			}
			t.Logf("seed %d: %d of 1500 decisions from the cache", seed, cached)
		})
	}
}
