package engine

import (
	"context"
	_ "embed"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// one is a script that touches no key and answers {1}.
var one = redis.NewScript(oneLua)

//go:embed testdata/one.lua
var oneLua string

// TestRingShardChurnKeepsNoStaleNodes: service discovery moves a
// Ring shard between two addresses (a failover, a rescheduled pod) many
// times. Each move makes go-redis a new shard *redis.Client and closes the
// old one; the engine makes a node for each. Keeping every one for ever
// (the closed client, its pool and a slot channel of PoolSize each) would
// grow the sync.Map by one per move. Want: no more nodes than shards in
// use.
func TestRingShardChurnKeepsNoStaleNodes(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s": a.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	e, err := New(Config{Client: ring, BreakerFailures: 5, BreakerOpen: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctx := context.Background()
	const moves = 100
	for i := range moves {
		addr := a.Addr
		if i%2 == 1 {
			addr = b.Addr
		}
		ring.SetAddrs(map[string]string{"s": addr})
		if _, _, err := e.Run(ctx, time.Second, 5*time.Second, one, []string{"k"}, nil); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
	}
	n := 0
	e.nodes.byShard.Range(func(_, _ any) bool { n++; return true })
	t.Logf("%d nodes after %d moves of one shard", n, moves)
	if n > 2 {
		t.Errorf("%d nodes kept for a Ring of one shard after %d moves: stale shards' nodes leak", n, moves)
	}
}
