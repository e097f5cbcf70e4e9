package ginlimit

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// heartbeatWait bounds the waits for a count to change: many heartbeat
// periods and TTLs, so that only a count that never changes fails it.
const heartbeatWait = 30 * time.Second

// waitCount waits until the Limiter of o counts n instances.
func waitCount(t *testing.T, o fleetMember, n int) {
	t.Helper()
	waitFleetCount(t, []fleetMember{o}, n)
}

// ruleKeys returns the keys of m but InstancesKey, where the limiters of
// the tests count each other.
func ruleKeys(m *miniredis.Miniredis) []string {
	return slices.DeleteFunc(m.Keys(), func(k string) bool { return k == InstancesKey })
}

// newMember returns a Limiter with opts on a client of its own of srv,
// closed when t ends, with the Policy of its defaults.
func newMember(t *testing.T, srv *redistest.Server, opts ...Option) fleetMember {
	t.Helper()
	c := srv.Client()
	l, err := New(append([]Option{Redis(c), Timeout(testTimeout), queueTimeout(testTimeout), Key(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := l.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return fleetMember{limiter: l, client: c, policy: p}
}

// TestHeartbeatCountsTheInstances: Limiters on one Redis count each other
// under random ids; one that closes drops out within its TTL; when Redis
// dies, each keeps the last count it saw.
func TestHeartbeatCountsTheInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b, c := newMember(t, srv), newMember(t, srv), newMember(t, srv)
	waitFleetCount(t, []fleetMember{a, b, c}, 3)
	ids, err := srv.Client().ZRange(context.Background(), InstancesKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, id := range ids {
		if !hexID.MatchString(id) {
			t.Errorf("instance id %q: want 32 random hex digits, naming nothing", id)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d ids in %s, want 3: %q", len(ids), InstancesKey, ids)
	}
	_ = c.limiter.Close()
	waitFleetCount(t, []fleetMember{a, b}, 2)
	srv.Stop()
	// Several beats fail; the count stays the one Redis last gave.
	time.Sleep(3 * HeartbeatPeriod)
	for _, o := range []fleetMember{a, b} {
		if got := o.count(); got != 2 {
			t.Errorf("during the outage an instance counts %d, want the last count seen, 2", got)
		}
	}
}

// TestHeartbeatNotStarvedByDecisions: with every decision slot of an
// instance's engine held, as under a flood of decisions, its heartbeat
// still reaches Redis and sees a new instance.
func TestHeartbeatNotStarvedByDecisions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newMember(t, srv)
	waitCount(t, a, 1)
	t.Cleanup(a.policy.route.Engine.HoldSlots())
	newMember(t, srv)
	waitCount(t, a, 2)
}

// TestLocalInstancesOverridesTheCount: the heartbeat's count divides a
// route's fallback unless LocalInstances is given, on the limiter or on
// the route, and the route's wins. Each fallback admits limit/n of a key
// it has never seen once Redis has gone.
func TestLocalInstancesOverridesTheCount(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const limit = 12
	live := newMember(t, srv, Limit(limit), Window(time.Hour))
	newMember(t, srv)
	waitCount(t, live, 2)
	fixed := newMember(t, srv, Limit(limit), Window(time.Hour), LocalInstances(6))
	waitCount(t, live, 3)
	routeWins, err := fixed.limiter.Policy(LocalInstances(1))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for _, tc := range []struct {
		name string
		p    *Policy
		want int
	}{
		{"the heartbeat's count, 3", live.policy, limit / 3},
		{"the limiter's LocalInstances(6)", fixed.policy, limit / 6},
		{"the route's LocalInstances(1)", routeWins, limit},
	} {
		admitted := 0
		for range 2 * limit {
			if d, _ := tc.p.Allow(context.Background(), "never-seen", 1); d.Allowed && d.Local {
				admitted++
			}
		}
		if admitted != tc.want {
			t.Errorf("%s: the fallback admitted %d of a fresh key, want %d", tc.name, admitted, tc.want)
		}
	}
}

// TestCloseEndsTheHeartbeat: a closed Limiter leaves no goroutine behind.
func TestCloseEndsTheHeartbeat(t *testing.T) {
	faultNoLeaks(t)
	srv := redistest.Start(t)
	o := newMember(t, srv)
	waitCount(t, o, 1)
	if err := o.limiter.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeatOnACluster: on Redis Cluster the heartbeat is one key, on
// one master, and Limiters on their own ClusterClients count each other.
func TestHeartbeatOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	var fleet []fleetMember
	for range 2 {
		c := cl.Client()
		l, err := New(Redis(c), Timeout(testTimeout), queueTimeout(testTimeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		p, err := l.Policy()
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, fleetMember{limiter: l, client: c, policy: p})
	}
	waitFleetCount(t, fleet, 2)
}

// beat drives one heartbeat of o's Limiter now (beatNow).
func (o fleetMember) beat(t *testing.T) int {
	t.Helper()
	return beatNow(t, o.limiter, o.client)
}

// beatNow drives one heartbeat of l on client now, as its loop would, and
// returns the count it keeps; it fails t unless Redis answered, so that
// the instance has heard from Redis. No test waits for the loop's own
// beats.
func beatNow(t *testing.T, l *Limiter, client redis.Scripter) int {
	t.Helper()
	l.mu.Lock()
	b, count := l.fleets[client], l.counts[client]
	l.mu.Unlock()
	if b == nil || count == nil {
		t.Fatal("the limiter does not beat on its client")
	}
	_ = b.fleet.Beat(context.Background())
	if !count.Heard() {
		t.Fatal("Redis did not answer the beat")
	}
	return count.Load()
}

// TestCloseLeavesTheCount: Limiters made and closed one after another,
// as short-lived processes or tests make them, take their ids out of
// InstancesKey as they close: the survivor's next beat counts 1, not one
// more per Limiter that ever ran, which would shrink its outage share.
func TestCloseLeavesTheCount(t *testing.T) {
	t.Parallel()
	const passing = 20
	srv := redistest.Start(t)
	survivor := newMember(t, srv)
	survivor.beat(t) // New beats only when Redis answered in time
	for range passing {
		o := newMember(t, srv)
		if got := o.beat(t); got < 2 {
			t.Fatalf("a new instance counts %d, want the survivor and itself", got)
		}
		_ = o.limiter.Close()
	}
	if got := survivor.beat(t); got != 1 {
		t.Errorf("after %d Limiters were made and closed, the survivor counts %d instances, want 1", passing, got)
	}
}

// closeBound is the most Close may take on a Redis that fails: a beat in
// flight and the call that takes the id out are each bounded by two
// heartbeat periods (a connection, then an answer); the rest is slack for
// a loaded machine. A Close that hangs never returns at all.
const closeBound = 4*HeartbeatPeriod + 6*time.Second

// TestCloseOnAFailingRedis: Close takes the id out best effort. On a Redis
// that is gone, or one that accepts the call and never answers, it gives
// up as its bound says and returns: it never hangs.
func TestCloseOnAFailingRedis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(srv *redistest.Server, proxy *slowProxy)
	}{
		{"stopped", func(srv *redistest.Server, _ *slowProxy) { srv.Stop() }},
		{"hung", func(_ *redistest.Server, proxy *slowProxy) { proxy.SetDelay(time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			proxy := startSlowProxy(t, srv.Addr, 0)
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			l, err := New(Redis(c), Timeout(testTimeout), queueTimeout(testTimeout))
			if err != nil {
				t.Fatal(err)
			}
			p, err := l.Policy()
			if err != nil {
				t.Fatal(err)
			}
			o := fleetMember{limiter: l, client: c, policy: p}
			if got := o.beat(t); got != 1 {
				t.Fatalf("the instance counts %d, want 1", got)
			}
			tc.fail(srv, proxy)
			start := time.Now()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > closeBound {
				t.Errorf("Close took %v on a failing Redis, want at most %v", took, closeBound)
			}
		})
	}
}
