package lua

// Tests of the token bucket at the bound of its settings.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestTokenBucketCapacityAt2Pow53: the bucket's settings allow
// burst*window = 2^53 exactly (lua.go, token_bucket_validate, and ginlimit's
// start-up check: Window 2^24 µs, Limit 1, Burst 2^29 is accepted). Then
// ahead + cost*window can be 2^53 + 1, which a double rounds to 2^53, the
// capacity: a request that needs one more 1/limit µs to conform could be
// admitted. Here the bucket is emptied at once (cost = burst), and 2^24 - 1
// µs later, one µs before a token is back, a request of cost 1 comes; GCRA
// says: rejected, retry 1 µs.
func TestTokenBucketCapacityAt2Pow53(t *testing.T) {
	t.Parallel()
	// On the real server only: miniredis keeps a TTL in ns, and this
	// bucket's (1.1e13 ms) overflows it, so the key is gone at once there.
	func(c *redis.Client) {
		ctx := context.Background()
		const window, limit, burst = 1 << 24, 1, 1 << 29
		s := singleFor(rule{alg: number(t, "token_bucket"), window: window, limit: limit, param: burst})
		key := prefix(t) + "tb"
		clock := startClock()
		got := ints(t, s.Run(ctx, c, []string{key}, singleArgs(clock, burst)...).Val())
		if got[1] != 0 || got[3] != 0 {
			t.Fatalf("emptying the bucket: %v, want admitted with 0 remaining", got)
		}
		got = ints(t, s.Run(ctx, c, []string{key}, singleArgs(clock+window-1, 1)...).Val())
		if want := []int64{1, 0, 0, 1, 1}; !slices.Equal(got[1:], want) {
			t.Fatalf("1 µs before the first token is back: reply %v, want rejected, 0 remaining, reset 1, retry 1 %v", got[1:], want)
		}
	}(redistest.Start(t).Client())
}

// TestTokenBucketAcrossNewSettings: the state is the bucket's level,
// stored with the limit and window it was written under, so a rule of
// other settings on the same key (an override's) goes on from it: a cut
// admits nothing until the level is under the new burst, draining at the
// new rate, and keeps the key while it drains although its TTL was set
// for the old rate; a raise gives the difference, draining at the old rate
// since the last admission (when the change came is not known); a new
// window reads the level in its own units.
func TestTokenBucketAcrossNewSettings(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		const w = int64(100e6) // long, so that no key expires on the server's own clock while the test runs
		rate := func(limit, window int64) rule {
			return rule{alg: number(t, "token_bucket"), window: window, limit: limit, param: limit}
		}
		now := startClock()
		key := prefix(t) + "tb3:{k}"
		step := func(what string, r rule, at, cost int64, admitted bool, remaining int64) {
			t.Helper()
			got := ints(t, singleFor(r).Run(ctx, c, []string{key}, singleArgs(at, cost)...).Val())
			if (got[1] == 0) != admitted || got[3] != remaining {
				t.Fatalf("%s: reply %v, want admitted %v with %d remaining", what, got, admitted, remaining)
			}
		}
		step("10 of 10", rate(10, w), now, 10, true, 0)
		step("cut to 5 at once", rate(5, w), now, 1, false, 0)
		// A window later, 5 tokens are back at the new rate: 5 still out.
		step("cut, a window later", rate(5, w), now+w, 1, false, 0)
		// The TTL the old rate set (1.25 windows) ends before the bucket is
		// full at the new one (2 windows): the rejection kept the key.
		ttl, err := c.PTTL(ctx, key).Result()
		if least := (now+2*w)/1000 + 1 - time.Now().UnixMilli(); err != nil || ttl.Milliseconds() < least {
			t.Fatalf("PTTL after the rejection under the cut: %v, %v; want at least %d ms", ttl, err, least)
		}
		step("cut, 1.2 windows later", rate(5, w), now+w+w/5, 1, true, 0)
		if v := c.Get(ctx, key).Val(); len(v) != 32 || v[21:] != pack4(5)+pack7(w) {
			t.Fatalf("stored %q, want the limit 5 and window %d at its end", v, w)
		}
		// 5 out at 1.2 windows; a fifth of a window later, at the old rate,
		// 4: a raise to 20 leaves 16, not the 19 of the new rate.
		step("raise to 20, cost 17", rate(20, w), now+w+2*w/5, 17, false, 16)
		step("raise to 20, cost 16", rate(20, w), now+w+2*w/5, 16, true, 0)
		// 20 tokens out of 20 per window; per 2 windows, the same 20 out,
		// and 10 back a window later.
		step("window doubled", rate(20, 2*w), now+w+2*w/5, 1, false, 0)
		step("window doubled, a window later", rate(20, 2*w), now+2*w+2*w/5, 11, false, 10)
	})
}
