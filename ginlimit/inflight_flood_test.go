package ginlimit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// The flood tests of this file flood instance A with real decisions on a
// real redis-server while A serves a request that holds the one slot of an
// InFlight(1) route: floodDeciders goroutines call Policy.Allow on another
// route of the same Limiter, in a loop, through a client whose pool has
// floodPool connection, so that A's pool is never free while they run.
// That client waits floodPoolTimeout for a connection, no longer, and
// does not retry (a cluster client's MaxRedirects -1): a call that finds
// the flood holding the connection fails at once, where a longer wait
// would make the outcome a race between the pool's queue and the CPU a
// loaded machine lends the flood. A's decisions take that pool directly,
// not through the auto-pipeliner, as on a cluster: each holds the
// connection for its whole call. So a renewal that needs a connection of
// that pool is refused (it was, in every run, before the lease lane had a
// pool of its own), and one on a pool of its own gets through, however
// slow the machine.
//
// Tens of deciders, not thousands, keep one connection busy: the flood
// then leaves the CPU for A's renewal timers, whose lateness on a loaded
// machine is CPU, which no pool can reserve. They are not parallel, for
// the same reason.
const (
	floodDeciders    = 32
	floodPool        = 1
	floodPoolTimeout = time.Microsecond // go-redis reads 0 as its default, 4 s
	// floodLease is long enough that CPU alone never lapses it: a renewal
	// runs every floodLease/3, so the lease lapses only when renewals fail
	// (or run late) for 2 s; beside two CPU-bound loops on 2 cores, under
	// the race detector, a renewal timer ran up to 0.5 s late.
	floodLease = 3 * time.Second
	// floodLeases is how many leases the flood lasts while A holds the
	// slot: every renewal in them had to get through for the slot to be
	// A's still.
	floodLeases = 4
)

// floodResult is what a flood test saw.
type floodResult struct {
	samples      int   // the times B tried to take the slot, and the lease was read
	admittedB    int   // B's requests admitted while A held the slot
	lapsed       int   // samples in which A held no live lease in Redis
	renewals     int   // times the end of A's lease was seen to move
	releaseLost  bool  // A's lease was still live in Redis after A's request ended
	decisions    int64 // the flood's decisions answered (admitted or refused)
	floodErrored int64 // the flood's decisions that got an error (ErrSaturated, mostly)
	took         time.Duration
}

func (r floodResult) String() string {
	return fmt.Sprintf("B admitted %d of %d tries, A's lease lapsed in %d samples, %d renewals seen, release lost %v; the flood: %d decisions answered, %d errors, over %v",
		r.admittedB, r.samples, r.lapsed, r.renewals, r.releaseLost, r.decisions, r.floodErrored, r.took.Round(time.Millisecond))
}

// leaseEnd reads the end of the one live lease of key, in µs on the Redis
// clock, through watch, a client of its own: 0 when no lease is live.
func leaseEnd(t *testing.T, watch redis.Cmdable, key string) int64 {
	t.Helper()
	ctx := context.Background()
	now, err := watch.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	entries, err := watch.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	for _, e := range entries {
		if end := int64(e.Score); end > now.UnixMicro() {
			return end
		}
	}
	return 0
}

// flood runs floodDeciders goroutines, each deciding through p in a loop
// on a key of its own, until stop is closed; it returns when every one has
// started, and wg tells when they have all ended.
func flood(p *Policy, stop <-chan struct{}, wg *sync.WaitGroup, answered, errored *atomic.Int64) {
	var started sync.WaitGroup
	for i := range floodDeciders {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			key := strconv.Itoa(i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.Allow(context.Background(), key, 1); err != nil {
					errored.Add(1)
				} else {
					answered.Add(1)
				}
			}
		})
	}
	started.Wait()
}

// holdThroughFlood is the scenario of the flood tests. A's Timeout is
// slotLimiter's generous one, as in the overload tests: "while Redis
// answers" is the premise, and a loaded machine under a flood makes calls
// miss the default 250 ms for want of CPU. A, on a client
// with a small pool, holds the slot of an InFlight(1, floodLease) route
// with one long request while a flood of A's own decisions runs; B, another
// instance on the same Redis (FailClosed, so that only Redis admits it),
// tries to take the slot every quarter lease, and watch reads A's lease in
// Redis. Then A's request ends, the flood still running, and its lease
// must be gone from Redis.
func holdThroughFlood(t *testing.T, a, b *Limiter, watch redis.Cmdable) floodResult {
	t.Helper()
	pre := prefix(t)
	key := pre + rule.SlotTag + "{GET /order}"
	ga, gb := newGate(), newGate()
	defer ga.open()
	defer gb.open()
	ea := slotEngine(a.RateLimit(Key(pre), InFlight(1, floodLease)), ga)
	eb := slotEngine(b.RateLimit(Key(pre), InFlight(1, floodLease)), gb)
	decide, err := a.Policy(Key(prefix(t)), Limit(100_000), Window(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan int, 1)
	go func() { done <- do(ea, http.MethodGet, "/order", nil).Code }()
	select {
	case <-ga.entered:
	case <-time.After(slotWait):
		t.Fatal("A's request never got its slot")
	}
	// The flood starts once A's lease has been renewed: its renewals have
	// their connection, and the flood is all that can stop the next ones.
	first := leaseEnd(t, watch, key)
	for end := first; end == first; end = leaseEnd(t, watch, key) {
		if end == 0 {
			t.Fatal("A's lease lapsed before the flood")
		}
		time.Sleep(floodLease / 20)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered, errored atomic.Int64
	defer wg.Wait()
	defer close(stop)
	flood(decide, stop, &wg, &answered, &errored)

	var res floodResult
	start := time.Now()
	last := leaseEnd(t, watch, key)
	for deadline := time.Now().Add(floodLeases * floodLease); time.Now().Before(deadline); {
		time.Sleep(floodLease / 4)
		res.samples++
		if w := do(eb, http.MethodGet, "/order?fast=1", nil); w.Code == http.StatusOK {
			res.admittedB++
		}
		switch end := leaseEnd(t, watch, key); {
		case end == 0:
			res.lapsed++
		case end != last:
			res.renewals++
			last = end
		}
	}
	ga.open()
	if code := <-done; code != http.StatusOK {
		t.Errorf("A's request: %d", code)
	}
	// A's release ran before its request returned: its lease is gone from
	// Redis, unless the release was lost (the lease then frees the slot
	// floodLease after its last renewal).
	res.releaseLost = leaseEnd(t, watch, key) != 0
	res.decisions, res.floodErrored, res.took = answered.Load(), errored.Load(), time.Since(start)
	return res
}

// checkFlood fails t unless A held its slot through the flood: B never
// admitted, A's lease live in every sample and renewed, its release not
// lost.
func checkFlood(t *testing.T, res floodResult) {
	t.Helper()
	t.Log(res)
	if res.admittedB > 0 || res.lapsed > 0 || res.releaseLost {
		t.Errorf("under a flood of decisions on A, with Redis answering: %v; want B never admitted, A's lease never lapsed, its release not lost", res)
	}
	// A lease that never lapsed over floodLeases leases was renewed; the
	// samples see most of those renewals, and at least a few.
	if res.renewals < floodLeases/2 {
		t.Errorf("A's lease was seen renewed %d times over %d leases, want at least %d", res.renewals, floodLeases, floodLeases/2)
	}
}

// TestInFlightLeaseOutlivesARealFlood: a flood of real concurrent
// decisions on instance A, through a client whose pool they fill, must not
// make the lease of a request A serves lapse, nor lose its release, while
// Redis answers: renewals and releases have a connection pool of their own
// (and their own dials). Before, they waited for the flood's connections
// and dials ("saturated: waiting for another call's dial"), A's lease
// lapsed, and B was handed the slot: two orders in flight under
// InFlight(1).
func TestInFlightLeaseOutlivesARealFlood(t *testing.T) {
	testtier.Long(t)
	srv := redistest.Start(t)
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ca := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: floodPool, PoolTimeout: floodPoolTimeout})
	t.Cleanup(func() { _ = ca.Close() })
	a := slotLimiter(t, ca, quiet, autoPipeline(false))
	b := slotLimiter(t, srv.Client(), OnFailure(FailClosed), quiet)
	checkFlood(t, holdThroughFlood(t, a, b, srv.Client()))
}

// TestInFlightLeaseOutlivesARealFloodCluster is
// TestInFlightLeaseOutlivesARealFlood on a Redis Cluster, whose masters
// each have a pool (and a lease pool) of their own.
func TestInFlightLeaseOutlivesARealFloodCluster(t *testing.T) {
	testtier.Long(t)
	cl := redistest.StartCluster(t)
	quiet := withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ca := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: floodPool, PoolTimeout: floodPoolTimeout, MaxRedirects: -1})
	t.Cleanup(func() { _ = ca.Close() })
	a := slotLimiter(t, ca, quiet, autoPipeline(false))
	b := slotLimiter(t, cl.Client(), OnFailure(FailClosed), quiet)
	checkFlood(t, holdThroughFlood(t, a, b, cl.Client()))
}
