package lua

// Tests of the token bucket at the bound of its settings.

import (
	"context"
	"slices"
	"testing"

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
