package ginlimit

// A *redis.Ring against real redis-servers: each shard is a node of its
// own, with its own breaker, and the nodes follow the shards as they come
// and go; a Ring stays exact under load.

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestAttack6RingShardBreakerIsItsOwn: on a Ring, each shard has its own
// breaker, as each cluster master has. One shard sits behind a proxy that
// holds every reply (a hung Redis); Breaker(2, 1h) opens for it after two
// timeouts, and decisions on the other shard are still answered by Redis,
// not refused with ErrCircuitOpen (with one breaker for the whole Ring they
// were).
func TestAttack6RingShardBreakerIsItsOwn(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	proxy := startSlowProxy(t, srv.Addr, time.Hour)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"fast": srv.Addr, "hung": proxy.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = ring.Close() })
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1000),
		OnFailure(FailClosed), Timeout(faultTimeout), Breaker(2, time.Hour))
	var hung, fast string
	for i := 0; hung == "" || fast == ""; i++ {
		k := "k" + strconv.Itoa(i)
		c, err := ring.GetShardClientForKey(p.rules[0].prefix + "{" + k + "}")
		if err != nil {
			t.Fatal(err)
		}
		if c.Options().Addr == proxy.Addr() {
			hung = k
		} else {
			fast = k
		}
	}
	ctx := context.Background()
	for range 2 {
		if _, err := p.Allow(ctx, hung); err == nil || errors.Is(err, ErrSaturated) {
			t.Fatalf("the hung shard: error %v, want a failure", err)
		}
	}
	if _, err := p.Allow(ctx, hung); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("the hung shard after two failures: error %v, want ErrCircuitOpen", err)
	}
	for range 5 {
		if d, err := p.Allow(ctx, fast); err != nil || !d.Allowed {
			t.Fatalf("the healthy shard while the hung one's breaker is open: decision %+v, error %v; want an admission from Redis", d, err)
		}
	}
	proxy.SetDelay(0) // the held replies come: the clients close at once
}
