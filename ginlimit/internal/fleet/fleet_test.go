package fleet

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// eventWait bounds the waits for an event: long, so that only an event
// that never comes fails a test.
const eventWait = 30 * time.Second

// seen records what a fleet's OnLimits received.
type seen struct {
	mu    sync.Mutex
	ov    *Overrides
	calls int
}

func (s *seen) on(ov *Overrides) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ov, s.calls = ov, s.calls+1
}

// limit returns the limit of the override of route, 0 for none, and how
// many times OnLimits was called.
func (s *seen) limit(route string) (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ov == nil {
		return 0, s.calls
	}
	return s.ov.Rules[RuleScope{Prefix: "p:", Method: "GET", Route: route}].Limit, s.calls
}

// anyField takes every field that parses as canonical: these tests write
// only canonical ones.
func anyField(RuleScope, string) bool { return true }

// member starts a fleet on a client of its own of srv, closed when t
// ends: it subscribes when sub, counts the instances when count, and its
// loop ticks every tick (a long one: only notices and the test drive it).
func member(t *testing.T, srv *redistest.Server, sub, count bool, tick time.Duration) (*Fleet, *seen, *state.Instances) {
	t.Helper()
	c := srv.Client()
	e, err := engine.New(engine.Config{Client: c}, Scripts()...)
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{}
	cfg := Config{Engine: e, Loaded: e.Loaded(), OnLimits: s.on, Canonical: anyField, tick: tick}
	var n *state.Instances
	if count {
		n = state.NewHeartbeatCount()
		cfg.Count = n
	}
	if sub {
		cfg.Subscriber = c
	}
	f := Start(cfg)
	t.Cleanup(func() { f.Close(); e.Close() })
	return f, s, n
}

// settled waits until f has loaded what its subscription's confirmation
// asked it to (Hub.up), so that a later load is a notice's.
func settled(t *testing.T, f *Fleet) {
	t.Helper()
	waitFor(t, "subscribed", f.Hub().Live)
	waitFor(t, "the load after the subscription", func() bool { return !f.stale.Load() && len(f.kick) == 0 })
	f.refresh.Lock()
	defer f.refresh.Unlock()
}

// waitFor waits until ok, or fails t after eventWait.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(eventWait); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, eventWait)
		}
	}
}

// set stores one rule's override through f.
func set(t *testing.T, f *Fleet, field, value string) {
	t.Helper()
	refused, applied, err := f.SetLimit(context.Background(), time.Second, time.Second, Change{Field: field, Value: value, Quota: 10, Rule: true})
	if err != nil || refused || applied != nil {
		t.Fatalf("SetLimit: refused %v, applied %v, %v", refused, applied, err)
	}
}

// TestOverrideNoticeIsPushed: a change of the overrides reaches another
// instance by its notice alone: that instance's loop ticks once an hour.
func TestOverrideNoticeIsPushed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, _, _ := member(t, srv, true, false, time.Hour)
	b, got, _ := member(t, srv, true, false, time.Hour)
	settled(t, a)
	settled(t, b)
	set(t, a, "p:{GET /x} *", "5 0")
	waitFor(t, "the notice applied on B", func() bool {
		limit, _ := got.limit("/x")
		return limit == 5
	})
}

// TestJoinNoticeIsPushed: an instance that joins is counted by another at
// once, by the notice of its first beat: that other one beats once an
// hour, and beat once before the newcomer came.
func TestJoinNoticeIsPushed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, _, n := member(t, srv, true, true, time.Hour)
	waitFor(t, "A subscribed", a.Hub().Live)
	if got := n.Load(); got != 1 {
		t.Fatalf("A alone counts %d", got)
	}
	member(t, srv, false, true, time.Hour)
	waitFor(t, "A counts B", func() bool { return n.Load() == 2 })
}

// TestMissedNoticeIsCaughtByOneTick: an instance that hears no notice (no
// subscription) applies a change by its next tick: the overrides' version
// on one that does not beat, the safety net of a missed notice.
func TestMissedNoticeIsCaughtByOneTick(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, _, _ := member(t, srv, true, false, time.Hour)
	b, got, _ := member(t, srv, false, false, time.Hour)
	_, before := got.limit("/y")
	set(t, a, "p:{GET /y} *", "7 0")
	if _, calls := got.limit("/y"); calls != before {
		t.Fatal("B, which hears no notice, applied the change before it ticked")
	}
	if err := b.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if limit, _ := got.limit("/y"); limit != 7 {
		t.Fatalf("B after one tick: limit %d, want the change's 7", limit)
	}
}

// scriptCalls returns how many scripts and PINGs srv has been sent: the
// calls a client makes, as INFO commandstats counts them (the commands a
// script runs are counted apart, under their own names).
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_ping") {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		calls, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		n += calls
	}
	return n
}

// TestATickIsOneCall: each tick of an idle instance that beats and
// subscribes is one call to Redis, the beat and the overrides' version in
// turn, and each echoes to its subscription, which then needs no PING.
func TestATickIsOneCall(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f, _, n := member(t, srv, true, true, time.Hour)
	waitFor(t, "subscribed", f.Hub().Live)
	admin := srv.Client()
	before := scriptCalls(t, admin)
	const ticks = 6
	for i := range ticks {
		echoes := f.hub.echoes.Load()
		if err := f.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "tick "+strconv.Itoa(i)+"'s echo", func() bool { return f.hub.echoes.Load() > echoes })
	}
	if got := scriptCalls(t, admin) - before; got != ticks {
		t.Fatalf("%d ticks made %d calls, want one each", ticks, got)
	}
	if !n.Heard() {
		t.Fatal("no beat among the ticks")
	}
}

// TestIdleFleetMakesOneCallPerTick: left to its own loop for a few ticks,
// an idle instance makes at most one call per Tick, and one more for a
// tick the loop's timer had already started.
func TestIdleFleetMakesOneCallPerTick(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f, _, _ := member(t, srv, true, true, 0)
	waitFor(t, "subscribed", f.Hub().Live)
	admin := srv.Client()
	before, start := scriptCalls(t, admin), time.Now()
	time.Sleep(5 * Tick)
	got := scriptCalls(t, admin) - before
	limit := int64(time.Since(start)/Tick) + 1
	t.Logf("%d calls in %v", got, time.Since(start).Round(time.Millisecond))
	if got > limit {
		t.Fatalf("%d calls in %v, want at most %d: one per Tick", got, time.Since(start).Round(time.Millisecond), limit)
	}
}
