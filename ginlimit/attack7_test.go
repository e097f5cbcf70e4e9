package ginlimit

// attack7: the per-shard nodes of a *redis.Ring and the stranded-call
// count of boundedCounting (commit 5a8df04), against real redis-servers.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// eventLog records the Breaker field of observed events.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (o *eventLog) Observe(_ context.Context, e Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

func (o *eventLog) last() Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events[len(o.events)-1]
}

// TestAttack7RingRecoveredReportsClosedBreaker: a Ring whose every shard
// is gone for a moment (SetAddrs with none: GetShardClientForKey fails)
// opens the Ring-wide breaker (ns.one). Once the shards are back, every
// decision is answered by Redis, yet ns.one is never told: a decision that
// reaches no node (a cached rejection) reports ns.one's state, "open" then
// "half-open" for ever, and the metrics collector's breaker gauge stays 1
// on a healthy Ring. On a cluster, ns.one is asked on every call and closes
// with the first answer.
func TestAttack7RingRecoveredReportsClosedBreaker(t *testing.T) {
	srv := redistest.Start(t)
	addrs := map[string]string{"a": srv.Addr}
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs})
	t.Cleanup(func() { _ = ring.Close() })
	obs := &eventLog{}
	const open = 50 * time.Millisecond
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1),
		OnFailure(FailClosed), Breaker(1, open), Observe(obs))
	ctx := context.Background()
	ring.SetAddrs(map[string]string{})
	if _, err := p.Allow(ctx, "k"); err == nil {
		t.Fatal("no shard: want an error")
	}
	if _, err := p.Allow(ctx, "k"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("no shard, second call: %v, want ErrCircuitOpen", err)
	}
	ring.SetAddrs(addrs)
	time.Sleep(2 * open)
	if d, err := p.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("shard back: %+v %v", d, err)
	}
	if d, err := p.Allow(ctx, "k"); err != nil || d.Allowed {
		t.Fatalf("shard back, over the limit: %+v %v", d, err)
	}
	// A decision that reaches no node (a cached rejection, once the
	// reset subscription is up) reports the Ring-wide breaker's state.
	for range 50 {
		if d, err := p.Allow(ctx, "k"); err == nil && d.Cached {
			if e := obs.last(); e.Breaker != "closed" {
				t.Errorf("the Ring answers every decision again, but a cached rejection reports breaker %q", e.Breaker)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := p.backend.nodes.state(); s != "closed" {
		t.Errorf("the Ring answers every decision again, but its Ring-wide breaker, reported for decisions that reach no node, is %q", s)
	}
}

// TestAttack7RingShardChurnKeepsNoStaleNodes: service discovery moves a
// Ring shard between two addresses (a failover, a rescheduled pod) many
// times. Each move makes go-redis a new shard *redis.Client and closes the
// old one; ginlimit makes a node for each, and kept every one for ever
// (the closed client, its pool and a slot channel of PoolSize each): the
// sync.Map grew by one per move. Want: no more nodes than shards in use.
func TestAttack7RingShardChurnKeepsNoStaleNodes(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s": a.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1000), OnFailure(FailClosed))
	ctx := context.Background()
	const moves = 100
	for i := range moves {
		addr := a.Addr
		if i%2 == 1 {
			addr = b.Addr
		}
		ring.SetAddrs(map[string]string{"s": addr})
		if _, err := p.Allow(ctx, "k"); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
	}
	n := 0
	p.backend.nodes.byShard.Range(func(_, _ any) bool { n++; return true })
	t.Logf("%d nodes after %d moves of one shard", n, moves)
	if n > 2 {
		t.Errorf("%d nodes kept for a Ring of one shard after %d moves: stale shards' nodes leak", n, moves)
	}
}

// TestAttack7RingReaddedShardGetsAFreshBreaker: a shard removed (its
// breaker open) and added back at the same address is a new go-redis
// client; its node must not be the old one's with the breaker still open.
func TestAttack7RingReaddedShardGetsAFreshBreaker(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startSlowProxy(t, srv.Addr, time.Hour)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s": proxy.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1000),
		OnFailure(FailClosed), Timeout(faultTimeout), Breaker(1, time.Hour))
	ctx := context.Background()
	_, _ = p.Allow(ctx, "k")
	if _, err := p.Allow(ctx, "k"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("hung shard: %v, want ErrCircuitOpen", err)
	}
	proxy.SetDelay(0)
	ring.SetAddrs(map[string]string{})
	ring.SetAddrs(map[string]string{"s": proxy.Addr()})
	if d, err := p.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("re-added shard: %+v %v", d, err)
	}
}

// TestAttack7StrandedCountEndsAtZero: boundedCounting's count of stranded
// calls, after many calls that return right about when they are abandoned
// (some before the grace ends, some after): every one it counted, it
// uncounts when the call returns, so it ends at zero (a count stuck above
// zero would make every later full pool a Redis failure).
func TestAttack7StrandedCountEndsAtZero(t *testing.T) {
	var stranded atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 100 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				d := time.Millisecond + time.Duration((g*100+i)%50)*time.Millisecond
				_, _ = boundedCounting(ctx, &stranded, func() (int, error) {
					time.Sleep(d)
					return 0, nil
				})
				cancel()
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for stranded.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if v := stranded.Load(); v != 0 {
		t.Errorf("stranded ends at %d, want 0", v)
	}
}

// TestAttack7RingExactUnderLoad: a Ring of two shards, 400 concurrent
// callers on 8 keys of limit 40 (ten calls each): every key admits exactly
// 40, nothing errs.
func TestAttack7RingExactUnderLoad(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	for _, cte := range []bool{false, true} {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, ContextTimeoutEnabled: cte})
		t.Cleanup(func() { _ = ring.Close() })
		p := mustPolicy(t, Redis(ring), Key(prefix(t)+strconv.FormatBool(cte)), Window(time.Hour), Limit(40),
			Timeout(time.Minute), QueueTimeout(time.Minute), OnFailure(FailClosed))
		var per [8]atomic.Int64
		allowConcurrently(t, 400, 10, func(g int) (Decision, error) {
			d, err := p.Allow(context.Background(), "k"+strconv.Itoa(g%8))
			if d.Allowed {
				per[g%8].Add(1)
			}
			return d, err
		})
		for k := range per {
			if n := per[k].Load(); n != 40 {
				t.Errorf("ContextTimeoutEnabled=%v: key %d admitted %d, want 40", cte, k, n)
			}
		}
	}
}
