package lua

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFixedWindowOlderFormat: a key in the fixed window's older format (a
// hash, s = the window's start and c = its count) is read as that count:
// a rejection leaves it as it is, an admission replaces it with the string
// of the current format, counting on, with the window's expiry. A stale
// hash (an older window) counts for nothing, and one of a newer window
// (the clock stepped back) counts on in it.
func TestFixedWindowOlderFormat(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		script := redis.NewScript(Single("fixed_window", 2))
		const window, limit = 10e6, 5
		r := rule{alg: 2, window: window, limit: limit, cost: 1}
		clock := startClock()
		start := clock - clock%window
		now := start + 1234
		p := prefix(t)
		hash := func(key string, s, count int64) {
			t.Helper()
			if err := c.HSet(ctx, key, "s", s, "c", count).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.PExpireAt(ctx, key, time.UnixMilli((s+window+999)/1000)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		run := func(key string, at int64, rr rule) []int64 {
			t.Helper()
			return ints(t, script.Run(ctx, c, []string{key}, args(at, rr)...).Val())
		}
		for _, tc := range []struct {
			what                       string
			s, count, cost             int64
			wantFired, wantRemaining   int64
			wantStart, wantStoredCount int64 // after an admission
		}{
			{"current window", start, 3, 1, 0, 1, start, 4},
			{"current window, full", start, 5, 1, 1, 0, 0, 0},
			{"current window, cost over", start, 3, 3, 1, 2, 0, 0},
			{"stale window", start - window, 5, 1, 0, 4, start, 1},
			{"newer window (clock stepped back)", start + window, 4, 1, 0, 0, start + window, 5},
		} {
			key := p + tc.what
			hash(key, tc.s, tc.count)
			before := state(ctx, t, c, key)
			rr := r
			rr.cost = tc.cost
			got := run(key, now, rr)
			if got[1] != tc.wantFired || got[3] != tc.wantRemaining {
				t.Fatalf("%s: reply %v, want fired %d and remaining %d", tc.what, got, tc.wantFired, tc.wantRemaining)
			}
			if tc.wantFired != 0 {
				if s := state(ctx, t, c, key); s != before {
					t.Fatalf("%s: a rejection changed the key from %s to %s", tc.what, before, s)
				}
				continue
			}
			want := "string " + pack7(tc.wantStart) + pack4(tc.wantStoredCount)
			if s := state(ctx, t, c, key); s != want {
				t.Fatalf("%s: stored %q, want %q", tc.what, s, want)
			}
			wantTTL := time.Duration((tc.wantStart+window+999)/1000)*time.Millisecond - time.Duration(time.Now().UnixMilli())*time.Millisecond
			if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > wantTTL+time.Second || ttl < wantTTL-5*time.Second {
				t.Fatalf("%s: TTL %v, want about %v (the end of the window)", tc.what, ttl, wantTTL)
			}
			// The next request counts on in the current format.
			if tc.wantRemaining == 0 {
				continue
			}
			if got := run(key, now+1, r); got[1] != 0 || got[3] != tc.wantRemaining-1 {
				t.Fatalf("%s: the next request: %v, want admitted with remaining %d", tc.what, got, tc.wantRemaining-1)
			}
		}
	})
}

// TestFixedWindowFormat: the key is the 11-byte string of the window's
// start and count, expiring with the window; admissions after the first of
// a window rewrite the count and keep the expiry.
func TestFixedWindowFormat(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		script := redis.NewScript(Single("fixed_window", 2))
		const window, limit = 10e6, 1000
		r := rule{alg: 2, window: window, limit: limit, cost: 1}
		clock := startClock()
		start := clock - clock%window
		key := prefix(t) + "k"
		for i := int64(1); i <= 3; i++ {
			rr := r
			rr.cost = i
			if got := ints(t, script.Run(ctx, c, []string{key}, args(start+i, rr)...).Val()); got[1] != 0 {
				t.Fatalf("admission %d: %v", i, got)
			}
			if s, want := state(ctx, t, c, key), "string "+pack7(start)+pack4(i*(i+1)/2); s != want {
				t.Fatalf("after admission %d: stored %q, want %q", i, s, want)
			}
			at := c.PExpireTime(ctx, key).Val()
			if want := time.Duration((start+window+999)/1000) * time.Millisecond; at != want {
				t.Fatalf("after admission %d: expires at %v, want %v", i, at, want)
			}
		}
		if mem, err := c.MemoryUsage(ctx, key, 0).Result(); err == nil && mem > 160 {
			t.Errorf("MEMORY USAGE %d bytes, want at most 160", mem)
		}
	})
}

// pack7 and pack4 are struct.pack's '>I7' and '>I4'.
func pack7(v int64) string { return packN(7, v) }
func pack4(v int64) string { return packN(4, v) }

func packN(n int, v int64) string {
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return string(b)
}
