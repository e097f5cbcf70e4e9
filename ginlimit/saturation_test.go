package ginlimit

// Saturation told apart from a Redis failure: a decision that gets no
// verdict from Redis because this process is out of connections or a call
// slot is ErrSaturated (never a breaker failure, never FailOpen's unlimited
// admission), while a Redis that answers nothing in time is a failure, on a
// plain client, a Ring and a cluster, against real redis-servers.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// busyPoolDecisions is the busy-pool scenario on client, whose pool has one
// connection: hold, the application's own blocking command, takes it for
// 1.5 s, and meanwhile three decisions are asked of a Limit(1) rule with
// Timeout(100ms), QueueTimeout(1s), Breaker(1, 1m), FailOpen and no deny
// cache (plus extra). Redis is healthy, so none may be admitted beyond the
// fallback's one, no breaker may open, and an error must be ErrSaturated.
// It returns how many were admitted, how many breakers are open and the
// last error.
func busyPoolDecisions(t *testing.T, client redis.Scripter, hold func(context.Context) error, extra ...Option) (admitted, open int, lastErr error) {
	t.Helper()
	ctx := context.Background()
	l, err := New(append([]Option{Redis(client), Timeout(100 * time.Millisecond), QueueTimeout(time.Second),
		Breaker(1, time.Minute), OnFailure(FailOpen), DenyCache(0)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy(Key(prefix(t)), Window(time.Hour), Limit(1))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hold(ctx)
	}()
	time.Sleep(200 * time.Millisecond)
	for range 3 {
		d, err := p.Allow(ctx, "client")
		lastErr = err
		if d.Allowed {
			admitted++
		}
	}
	<-done
	if p.backend.nodes.one.brk.state() == "open" {
		open++
	}
	count := func(_, v any) bool {
		if v.(*node).brk.state() == "open" {
			open++
		}
		return true
	}
	p.backend.nodes.byAddr.Range(count)
	p.backend.nodes.byShard.Range(count) // a Ring's shards (attack7)
	return admitted, open, lastErr
}

// TestAttack5BusyRingPoolTripsBreaker: a busy client is not a failing
// Redis: a decision that cannot get a connection in time is ErrSaturated,
// never trips the breaker and is never answered by FailOpen's unlimited
// admission. poolBusy, which tells a wait for a pooled connection from a
// Redis that does not answer, used to know only *redis.Client: on a
// *redis.Ring, a pool whose connections the application's own commands
// hold (here one BLPOP on a pool of 1) turned every decision into a Redis
// failure, the breaker opened and FailOpen let requests through (review
// 5). It now asks the pool of the shard that serves the key.
func TestAttack5BusyRingPoolTripsBreaker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, cte := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", cte), func(t *testing.T) {
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, PoolSize: 1, ContextTimeoutEnabled: cte})
			t.Cleanup(func() { _ = ring.Close() })
			ctx := context.Background()
			if err := ring.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			admitted, open, lastErr := busyPoolDecisions(t, ring, func(ctx context.Context) error {
				return ring.BLPop(ctx, 1500*time.Millisecond, prefix(t)+"nothing").Err()
			}, AutoPipeline(false))
			if admitted > 1 || open > 0 || (lastErr != nil && !errors.Is(lastErr, ErrSaturated)) {
				t.Fatalf("application holds the Ring's only connection (Redis healthy): %d of 3 admitted at Limit(1), %d breakers open, last error %v", admitted, open, lastErr)
			}
		})
	}
}

// TestAttack5BusyPlainPoolHolds is the control of
// TestAttack5BusyRingPoolTripsBreaker: the same application command on a
// plain *redis.Client's pool of 1 gives ErrSaturated, no admission beyond
// the in-process fallback's and no open breaker.
func TestAttack5BusyPlainPoolHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	admitted, open, lastErr := busyPoolDecisions(t, c, func(ctx context.Context) error {
		return c.BLPop(ctx, 1500*time.Millisecond, prefix(t)+"nothing").Err()
	}, AutoPipeline(false))
	if admitted > 1 || open > 0 || !errors.Is(lastErr, ErrSaturated) {
		t.Fatalf("plain client: %d of 3 admitted, %d breakers open, last error %v", admitted, open, lastErr)
	}
}

// TestAttack5BusyClusterPoolTripsBreaker is TestAttack5BusyRingPoolTripsBreaker
// on a real 3-master Redis Cluster: the application's BLPOP holds the one
// connection of the master that owns the decision's key.
func TestAttack5BusyClusterPoolTripsBreaker(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := context.Background()
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	admitted, open, lastErr := busyPoolDecisions(t, cc, func(ctx context.Context) error {
		return cc.BLPop(ctx, 1500*time.Millisecond, "{client}:nothing").Err() // the decision key's slot
	})
	if admitted > 1 || open > 0 || (lastErr != nil && !errors.Is(lastErr, ErrSaturated)) {
		t.Fatalf("application holds the master's only connection (cluster healthy): %d of 3 admitted at Limit(1), %d breakers open, last error %v", admitted, open, lastErr)
	}
}
