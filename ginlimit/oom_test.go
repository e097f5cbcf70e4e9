package ginlimit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestOOMRefusedBeforeAnyWrite: on a real redis-server at maxmemory with
// noeviction, an admission is refused with Redis's OOM error before the
// script writes anything, for every algorithm, on one rule and on two, also
// when the key holds data the script would sweep first (a sweep is a write
// Redis does not check, and after it Redis checks no later write of the
// call). The failure policy answers, and a rejection of a full key still
// answers as usual.
func TestOOMRefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
		for _, rules := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/%d rules", alg, rules), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				c := srv.Client()
				opts := []Option{Redis(c), Key(prefix(t)), Window(10 * time.Second), Limit(3), Algorithm(alg),
					OnFailure(FailClosed), DenyCache(0), withBreaker(0, 0)}
				if rules == 2 {
					opts = append(opts, Rule(Name("a")), Rule(Name("b"), Limit(5)))
				}
				p := mustPolicy(t, opts...)
				// The test clock runs ahead of the server's wall clock, so no
				// key expires on its own during the test.
				now := time.Now().Add(time.Minute).UnixMicro()
				p.route.Clock = func() int64 { return now }
				// Data a script would sweep or rewrite: an admission on
				// "old" a window ago, and a full "full" now.
				if d, err := p.Allow(ctx, "old", 1); err != nil || !d.Allowed {
					t.Fatalf("setup: %+v, %v", d, err)
				}
				now += (11 * time.Second).Microseconds()
				for range 3 {
					if d, err := p.Allow(ctx, "full", 1); err != nil || !d.Allowed {
						t.Fatalf("setup: %+v, %v", d, err)
					}
				}
				before := dump(t, srv)
				if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.ConfigSet(ctx, "maxmemory", "0").Err() })
				for _, key := range []string{"old", "new"} {
					d, err := p.Allow(ctx, key, 1)
					if err == nil || !strings.Contains(err.Error(), "OOM") || d.Allowed {
						t.Fatalf("admission on %q at maxmemory: %+v, %v; want Redis's OOM error under FailClosed", key, d, err)
					}
				}
				d, err := p.Allow(ctx, "full", 1)
				if err != nil || d.Allowed {
					t.Fatalf("rejection of a full key at maxmemory: %+v, %v; want a plain rejection", d, err)
				}
				if after := dump(t, srv); !maps.Equal(before, after) {
					t.Fatalf("the scripts wrote at maxmemory:\nbefore %v\nafter  %v", before, after)
				}
			})
		}
	}
}

// redisClient names a client in a table of backends.
type redisClient struct{ *redis.Client }

// dump returns every key of the server with its type and a rendering of its
// value, to tell whether a script wrote anything. InstancesKey is left out:
// the limiter's heartbeat renews it in the background, whenever its period
// comes round, and it is not what the test asks about.
func dump(t *testing.T, srv *redistest.Server) map[string]string {
	t.Helper()
	c := srv.Client()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == InstancesKey })
	out := map[string]string{}
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		var v any
		switch typ {
		case "zset":
			v = c.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "hash":
			v = c.HGetAll(ctx, k).Val()
		case "string":
			v = c.Get(ctx, k).Val()
		}
		out[k] = fmt.Sprintf("%s %v", typ, v)
	}
	return out
}

// TestClockSteppingBackStaysConservative: when the Redis clock steps back
// 30 s, no algorithm admits more than it would have without the step: with a
// limit of 10 per minute, 10 admitted before the step, none after it until
// the original window would allow it. On miniredis and a real server.
func TestClockSteppingBackStaysConservative(t *testing.T) {
	t.Parallel()
	_, mini := newMini(t)
	real := redistest.Start(t).Client()
	ctx := context.Background()
	for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
		for name, c := range map[string]*redisClient{"miniredis": {mini}, "redis": {real}} {
			t.Run(fmt.Sprintf("%v/%s", alg, name), func(t *testing.T) {
				p := mustPolicy(t, Redis(c.Client), Key(prefix(t)), Window(time.Minute), Limit(10), Algorithm(alg), DenyCache(0))
				// 10 s into a minute (so the fixed window's step lands in the
				// previous window), a little ahead of the wall clock.
				now := time.Now().Truncate(time.Minute).Add(2*time.Minute + 10*time.Second).UnixMicro()
				p.route.Clock = func() int64 { return now }
				for i := range 10 {
					if d, err := p.Allow(ctx, "k", 1); err != nil || !d.Allowed {
						t.Fatalf("admission %d: %+v, %v", i, d, err)
					}
				}
				now -= (30 * time.Second).Microseconds()
				for i := range 10 {
					if d, err := p.Allow(ctx, "k", 1); err != nil || d.Allowed {
						t.Fatalf("after the clock stepped back 30 s, request %d: %+v, %v; want a rejection", i, d, err)
					}
					now += time.Second.Microseconds()
				}
			})
		}
	}
}
