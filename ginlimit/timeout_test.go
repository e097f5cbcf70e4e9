package ginlimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/internal/testtier"
)

// TestTimeoutHoldsForEveryClientKind: against a Redis that accepts
// connections and never answers, a decision with Timeout(100ms) is answered
// within its bound on every kind of client, with and without
// ContextTimeoutEnabled: a plain Client, a ClusterClient whose seed node
// hangs (so its slots never load), a Ring, and a failover client whose
// sentinel hangs. Nothing that can block runs outside the bound.
func TestTimeoutHoldsForEveryClientKind(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	const timeout = 100 * time.Millisecond
	// A bound, not a performance goal: the call and the PING that confirms
	// its timeout (node.answers), generous for a loaded machine, and far
	// below the seconds a blocking step outside the bound costs.
	const bound = 2*timeout + 800*time.Millisecond
	for _, ctxAware := range []bool{false, true} {
		clients := map[string]redis.Scripter{
			"client": redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: ctxAware}),
			"cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{blackhole(t)},
				ContextTimeoutEnabled: ctxAware}),
			"ring": redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": blackhole(t)},
				ContextTimeoutEnabled: ctxAware}),
			"failover": redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m",
				SentinelAddrs: []string{blackhole(t)}, ContextTimeoutEnabled: ctxAware}),
		}
		for name, c := range clients {
			t.Cleanup(func() { _ = c.(interface{ Close() error }).Close() })
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", name, ctxAware), func(t *testing.T) {
				start := time.Now()
				p := mustPolicy(t, Redis(c), Key(prefix(t)), Timeout(timeout), OnFailure(FailClosed), withBreaker(0, 0))
				if el := time.Since(start); el > bound+engine.LoadTimeout {
					t.Fatalf("New took %v: loading the scripts is not bounded", el)
				}
				for i := range 3 {
					start := time.Now()
					d, err := p.Allow(context.Background(), "k", 1)
					if el := time.Since(start); el > bound {
						t.Fatalf("ContextTimeoutEnabled=%v, decision %d took %v with Timeout(%v)", ctxAware, i, el, timeout)
					}
					if err == nil || d.Allowed {
						t.Fatalf("decision %d: %+v, %v; want FailClosed's refusal", i, d, err)
					}
				}
			})
		}
	}
}
