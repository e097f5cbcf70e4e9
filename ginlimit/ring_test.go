package ginlimit

// A *redis.Ring against real redis-servers: each shard is a node of its
// own, with its own breaker, and the nodes follow the shards as they come
// and go; a Ring stays exact under load.

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

// TestRingShardBreakerIsItsOwn: on a Ring, each shard has its own
// breaker, as each cluster master has. One shard sits behind a proxy that
// holds every reply (a hung Redis); withBreaker(2, 1h) opens for it after two
// timeouts, and decisions on the other shard are still answered by Redis,
// not refused with ErrCircuitOpen (as one breaker for the whole Ring would
// refuse them).
func TestRingShardBreakerIsItsOwn(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	proxy := startSlowProxy(t, srv.Addr, time.Hour)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"fast": srv.Addr, "hung": proxy.Addr()},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = ring.Close() })
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1000),
		OnFailure(FailClosed), Timeout(faultTimeout), withBreaker(2, time.Hour))
	var hung, fast string
	for i := 0; hung == "" || fast == ""; i++ {
		k := "k" + strconv.Itoa(i)
		c, err := ring.GetShardClientForKey(p.route.Rules[0].Prefix + "{" + k + "}")
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
		if _, err := p.Allow(ctx, hung, 1); err == nil || errors.Is(err, ErrSaturated) {
			t.Fatalf("the hung shard: error %v, want a failure", err)
		}
	}
	if _, err := p.Allow(ctx, hung, 1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("the hung shard after two failures: error %v, want ErrCircuitOpen", err)
	}
	for range 5 {
		if d, err := p.Allow(ctx, fast, 1); err != nil || !d.Allowed {
			t.Fatalf("the healthy shard while the hung one's breaker is open: decision %+v, error %v; want an admission from Redis", d, err)
		}
	}
	proxy.SetDelay(0) // the held replies come: the clients close at once
}

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

// TestRingRecoveredReportsClosedBreaker: a Ring whose every shard
// is gone for a moment (SetAddrs with none: GetShardClientForKey fails)
// opens the Ring-wide breaker (ns.one). Once the shards are back, every
// decision is answered by Redis, and ns.one must be told: a decision that
// reaches no node (a cached rejection) reports ns.one's state, which would
// otherwise stay "open" then "half-open" for ever, with the metrics
// collector's breaker gauge at 1 on a healthy Ring. On a cluster, ns.one
// is asked on every call and closes with the first answer.
func TestRingRecoveredReportsClosedBreaker(t *testing.T) {
	srv := redistest.Start(t)
	addrs := map[string]string{"a": srv.Addr}
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs})
	t.Cleanup(func() { _ = ring.Close() })
	obs := &eventLog{}
	const open = 50 * time.Millisecond
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1),
		OnFailure(FailClosed), withBreaker(1, open), Observe(obs.Observe))
	ctx := context.Background()
	ring.SetAddrs(map[string]string{})
	if _, err := p.Allow(ctx, "k", 1); err == nil {
		t.Fatal("no shard: want an error")
	}
	if _, err := p.Allow(ctx, "k", 1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("no shard, second call: %v, want ErrCircuitOpen", err)
	}
	ring.SetAddrs(addrs)
	time.Sleep(2 * open)
	if d, err := p.Allow(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("shard back: %+v %v", d, err)
	}
	if d, err := p.Allow(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("shard back, over the limit: %+v %v", d, err)
	}
	// A decision that reaches no node (a cached rejection, once the
	// reset subscription is up) reports the Ring-wide breaker's state.
	for range 50 {
		if d, err := p.Allow(ctx, "k", 1); err == nil && d.Cached {
			if e := obs.last(); e.Breaker != "closed" {
				t.Errorf("the Ring answers every decision again, but a cached rejection reports breaker %q", e.Breaker)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := p.route.Engine.Breaker().State(); s != "closed" {
		t.Errorf("the Ring answers every decision again, but its Ring-wide breaker, reported for decisions that reach no node, is %q", s)
	}
}

// TestRingReaddedShardGetsAFreshBreaker: a shard removed (its
// breaker open) and added back at the same address is a new go-redis
// client; its node must not be the old one's with the breaker still open.
func TestRingReaddedShardGetsAFreshBreaker(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startSlowProxy(t, srv.Addr, time.Hour)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s": proxy.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	p := mustPolicy(t, Redis(ring), Key(prefix(t)), Window(time.Minute), Limit(1000),
		OnFailure(FailClosed), Timeout(faultTimeout), withBreaker(1, time.Hour))
	ctx := context.Background()
	_, _ = p.Allow(ctx, "k", 1)
	if _, err := p.Allow(ctx, "k", 1); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("hung shard: %v, want ErrCircuitOpen", err)
	}
	proxy.SetDelay(0)
	ring.SetAddrs(map[string]string{})
	ring.SetAddrs(map[string]string{"s": proxy.Addr()})
	d, err := p.Allow(ctx, "k", 1)
	// A reply this process read late (its first call on the new client
	// dials and loads the script, on a loaded machine past the 100 ms
	// Timeout) is no verdict on Redis, nor on the breaker: ask again.
	for deadline := time.Now().Add(30 * time.Second); errors.Is(err, ErrSaturated) && time.Now().Before(deadline); {
		d, err = p.Allow(ctx, "k", 1)
	}
	if err != nil || !d.Allowed {
		t.Fatalf("re-added shard: %+v %v", d, err)
	}
}

// TestRingExactUnderLoad: a Ring of two shards, 400 concurrent
// callers on 8 keys of limit 40 (ten calls each): every key admits exactly
// 40, nothing errs.
func TestRingExactUnderLoad(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	for _, cte := range []bool{false, true} {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, ContextTimeoutEnabled: cte})
		t.Cleanup(func() { _ = ring.Close() })
		p := mustPolicy(t, Redis(ring), Key(prefix(t)+strconv.FormatBool(cte)), Window(time.Hour), Limit(40),
			Timeout(time.Minute), queueTimeout(time.Minute), OnFailure(FailClosed))
		var per [8]atomic.Int64
		allowConcurrently(t, 400, 10, func(g int) (Decision, error) {
			d, err := p.Allow(context.Background(), "k"+strconv.Itoa(g%8), 1)
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
