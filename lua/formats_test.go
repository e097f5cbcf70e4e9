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
		const window, limit = 10e6, 5
		r := rule{alg: 2, window: window, limit: limit, cost: 1}
		script := singleFor(r)
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
			return ints(t, script.Run(ctx, c, []string{key}, singleArgs(at, rr.cost)...).Val())
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
			// The server's time before the call: miniredis's frozen clock,
			// or a real Redis's, which its TTLs count down from. A TTL
			// compared with the time after the call instead failed on a
			// loaded machine: miniredis's TTL does not count down, so the
			// seconds this process lost made it look too long.
			srvBefore, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
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
			end := time.UnixMilli((tc.wantStart + window + 999) / 1000)
			ttl := c.PTTL(ctx, key).Val()
			// At most the end less the server's time before the call, at
			// least the end less the time now (a real Redis's TTL counts
			// down, miniredis's stays), each with the old slack.
			if most, least := end.Sub(srvBefore), time.Until(end); ttl <= 0 || ttl > most+time.Second || ttl < least-5*time.Second {
				t.Fatalf("%s: TTL %v, want about %v (the end of the window)", tc.what, ttl, most)
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
		const window, limit = 10e6, 1000
		r := rule{alg: 2, window: window, limit: limit, cost: 1}
		script := singleFor(r)
		clock := startClock()
		start := clock - clock%window
		key := prefix(t) + "k"
		for i := int64(1); i <= 3; i++ {
			rr := r
			rr.cost = i
			if got := ints(t, script.Run(ctx, c, []string{key}, singleArgs(start+i, rr.cost)...).Val()); got[1] != 0 {
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

// TestTokenBucketFormat: the key is 32 bytes (base, ahead, the time its TTL
// lasts until, the limit and the window); an admission sets the TTL, a quarter of the time to fill
// from empty beyond the full bucket, only when the one the key has is too
// short, and otherwise rewrites the first 14 bytes and keeps it.
func TestTokenBucketFormat(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		// 10 per 10 s (T = 1 s), burst 8: 8 s to fill, 2 s of slack.
		r := rule{alg: 3, window: 10e6, limit: 10, param: 8, cost: 1}
		script := singleFor(r)
		now := startClock()
		key := prefix(t) + "k"
		run := func(at int64) {
			t.Helper()
			if got := ints(t, script.Run(ctx, c, []string{key}, singleArgs(at, r.cost)...).Val()); got[1] != 0 {
				t.Fatalf("at %d: rejected: %v", at, got)
			}
		}
		stored := func() (base, ahead, until int64) {
			t.Helper()
			v := c.Get(ctx, key).Val()
			if len(v) != 32 || v[21:] != pack4(r.limit)+pack7(r.window) {
				t.Fatalf("stored %q, want 32 bytes ending in the limit and the window", v)
			}
			for i, p := range []*int64{&base, &ahead, &until} {
				for _, b := range []byte(v[7*i : 7*i+7]) {
					*p = *p<<8 | int64(b)
				}
			}
			return
		}
		// checkTTL fails t unless the key's TTL is at most set and at
		// least set less the time since it was set: a real Redis counts it
		// down while this process, on a loaded machine, may lose seconds
		// (miniredis's clock is frozen, so its TTL reads set).
		checkTTL := func(set time.Duration, since time.Time) {
			t.Helper()
			if ttl, least := c.PTTL(ctx, key).Val(), set-time.Since(since)-100*time.Millisecond; ttl > set || ttl < least {
				t.Fatalf("TTL %v, want %v (at least %v)", ttl, set, least)
			}
		}
		sent := time.Now()
		run(now)
		base, ahead, until := stored()
		// The TTL: full again in 1 s, and 2 s more.
		if base != now || ahead != 10e6 || until != now+3e6 {
			t.Fatalf("first admission stored %d %d %d, want %d %d %d", base, ahead, until, now, int64(10e6), now+int64(3e6))
		}
		checkTTL(3*time.Second, sent)
		// Another admission at once: full again in 2 s, covered; the TTL
		// stays. miniredis's clock is frozen, so the TTL reads the same.
		sent = time.Now()
		c.PExpire(ctx, key, 2500*time.Millisecond)
		run(now)
		if base, ahead, u := stored(); base != now || ahead != 20e6 || u != until {
			t.Fatalf("second admission stored %d %d %d, want %d %d %d", base, ahead, u, now, int64(20e6), until)
		}
		checkTTL(2500*time.Millisecond, sent) // the TTL it had
		// A third: full again in 3 s, which the TTL does not cover (the
		// spare millisecond): set again, to 3 s + 2 s.
		sent = time.Now()
		run(now)
		if base, ahead, u := stored(); base != now || ahead != 30e6 || u != now+5e6 {
			t.Fatalf("third admission stored %d %d %d, want %d %d %d", base, ahead, u, now, int64(30e6), now+int64(5e6))
		}
		checkTTL(5*time.Second, sent)
		if mem, err := c.MemoryUsage(ctx, key, 0).Result(); err == nil && mem > 160 {
			t.Errorf("MEMORY USAGE %d bytes, want at most 160", mem)
		}
	})
}
