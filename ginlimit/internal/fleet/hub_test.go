package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// panickingSubscriber stands for a go-redis Ring with every shard down,
// whose Subscribe panics.
type panickingSubscriber struct{}

func (panickingSubscriber) Subscribe(context.Context, ...string) *redis.PubSub {
	panic("redis: all ring shards are down")
}

// TestSubscribePanicIsAnError: a client whose Subscribe panics (a Ring with
// every shard down) gives the hub an error to retry on, not a panic that
// ends the process from its goroutine.
func TestSubscribePanicIsAnError(t *testing.T) {
	t.Parallel()
	if _, err := subscribe(context.Background(), panickingSubscriber{}, "ginlimit:reset"); err == nil || !strings.Contains(err.Error(), "all ring shards are down") {
		t.Fatalf("error %v, want the panic as an error", err)
	}
}

// hubOn starts a hub on c's reset channel, publishing with c, and waits
// until it is live.
func hubOn(t *testing.T, c *redis.Client) *Hub {
	t.Helper()
	const channel = "ginlimit:reset"
	publish := func(ctx context.Context, payload string) (int64, error) {
		return c.Publish(ctx, channel, payload).Result()
	}
	h := StartHub(c, []string{channel}, publish, time.Second)
	t.Cleanup(h.Close)
	for deadline := time.Now().Add(30 * time.Second); !h.Live(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hub's subscription was not up within 30 s")
		}
	}
	return h
}

// refused reports whether c answers a request on key with a certain
// rejection.
func refused(c *state.DenyCache, key string) bool {
	return c.Enter(key, 1).Verdict == state.Reject
}

// TestHubAnnounceReachesEveryHub: a reset announced by one hub makes every
// hub's caches and fallbacks forget the keys before Announce returns, and
// Announce counts every acknowledgement.
func TestHubAnnounceReachesEveryHub(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	a, b := hubOn(t, c), hubOn(t, c)
	caches := []*state.DenyCache{newDenyCache(64, time.Hour), newDenyCache(64, time.Hour)}
	locals := []*state.Buckets{state.NewBuckets(10, state.NewInstances(1), time.Hour, 64), state.NewBuckets(10, state.NewInstances(1), time.Hour, 64)}
	for i, h := range []*Hub{a, b} {
		h.Track(caches[i], locals[i])
		caches[i].Leave("k", caches[i].Stamp(), state.Answer{Remaining: 0, Reset: time.Hour, At: time.Now()})
		locals[i].Learn("k", state.Answer{Remaining: 0, Reset: time.Hour, At: time.Now()}, time.Now())
		if !refused(caches[i], "k") {
			t.Fatalf("cache %d did not learn the refusal", i)
		}
	}
	publish := func(ctx context.Context, payload string) (int64, error) {
		return c.Publish(ctx, "ginlimit:reset", payload).Result()
	}
	if err := Announce(context.Background(), a, publish, []string{"k"}, time.Minute); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	for i := range caches {
		if refused(caches[i], "k") {
			t.Fatalf("cache %d still refuses after the reset was announced", i)
		}
		if _, _, ok := locals[i].Take("k", time.Now(), 1); !ok {
			t.Fatalf("fallback %d still refuses after the reset was announced", i)
		}
	}
}

// TestHubLoseClearsAndStopsLearning: a lost subscription clears what the
// caches hold, and a call that started before the loss keeps nothing.
func TestHubLoseClearsAndStopsLearning(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := hubOn(t, c)
	cache := newDenyCache(64, time.Hour)
	h.Track(cache, nil)
	refusal := state.Answer{Remaining: 0, Reset: time.Hour, At: time.Now()}
	cache.Leave("k", cache.Stamp(), refusal)
	before := cache.Stamp()
	h.Lose()
	if refused(cache, "k") {
		t.Fatal("the cache still refuses after the subscription was lost")
	}
	cache.Leave("k", before, refusal)
	if refused(cache, "k") {
		t.Fatal("a call from before the loss was kept")
	}
}

// TestHubTrackIsAmortizedConstant: tracking n caches and fallbacks that
// all stay in use looks at O(n) entries in all, not at every entry tracked
// so far on each registration.
func TestHubTrackIsAmortizedConstant(t *testing.T) {
	t.Parallel()
	h := &Hub{}
	const n = 10_000
	keep := make([]*state.DenyCache, 0, n)
	locals := make([]*state.Buckets, 0, n)
	for range n {
		c := state.NewDenyCache(state.DenyConfig{Size: 1})
		l := state.NewBuckets(10, nil, time.Minute, 1)
		keep, locals = append(keep, c), append(locals, l)
		h.Track(c, l)
	}
	h.mu.Lock()
	visited := h.visited
	h.mu.Unlock()
	t.Logf("tracking %d caches and %d fallbacks looked at %d entries", n, n, visited)
	if visited > 8*n {
		t.Errorf("tracking %d caches and fallbacks looked at %d entries, want at most %d", n, visited, 8*n)
	}
	if len(keep) != n || len(locals) != n {
		t.Fatal("unreachable: keeps them in use")
	}
}

// newDenyCache returns a deny cache of size keys with the staleness bound
// staleness, that keeps a refusal.
func newDenyCache(size int, staleness time.Duration) *state.DenyCache {
	return state.NewDenyCache(state.DenyConfig{Size: size, Staleness: staleness, ExactBelow: 64})
}
