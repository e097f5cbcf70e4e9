package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStartCluster: the cluster serves every slot from three masters,
// MasterForKey agrees with the servers and with go-redis, and a stopped
// master takes only its own slots down.
func TestStartCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	addrs := c.Addrs()
	if len(addrs) != 3 || addrs[0] == addrs[1] || addrs[1] == addrs[2] || addrs[0] == addrs[2] {
		t.Fatalf("Addrs() = %q, want three distinct nodes", addrs)
	}
	ctx := context.Background()
	cc := c.Client()
	nodes := []*redis.Client{c.NodeClient(0), c.NodeClient(1), c.NodeClient(2)}
	keys := []string{"", "a", "{}", "{}x", "x{}", "{a}b", "a{b}{c}", "{user1000}.following", "foo{bar", "}{", "\xff\x00{\xfe}"}
	for range 200 {
		keys = append(keys, fmt.Sprintf("k:%x", rand.Uint64()))
	}
	perNode := make([]int, len(addrs))
	for _, k := range keys {
		want, err := nodes[0].ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := KeySlot(k); int64(got) != want {
			t.Fatalf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
		m := c.MasterForKey(k)
		perNode[m]++
		if k == "" {
			continue // go-redis routes the empty key to a random slot
		}
		gm, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if gm.Options().Addr != addrs[m] {
			t.Fatalf("MasterForKey(%q) = %d (%s), go-redis says %s", k, m, addrs[m], gm.Options().Addr)
		}
	}
	for i, n := range perNode {
		if n == 0 {
			t.Fatalf("no key of %d on node %d: %v", len(keys), i, perNode)
		}
	}

	// One key per master, written through the cluster client, found on
	// that master; the others redirect.
	byNode := make([]string, len(addrs))
	for n := 0; ; n++ {
		k := fmt.Sprintf("probe:%d", n)
		if m := c.MasterForKey(k); byNode[m] == "" {
			byNode[m] = k
		}
		if byNode[0] != "" && byNode[1] != "" && byNode[2] != "" {
			break
		}
	}
	for i, k := range byNode {
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for j, nc := range nodes {
			n, err := nc.Exists(ctx, k).Result()
			if i == j && (err != nil || n != 1) {
				t.Fatalf("key %s of node %d: EXISTS = %d, %v", k, i, n, err)
			}
			if i != j && (err == nil || !strings.HasPrefix(err.Error(), "MOVED ")) {
				t.Fatalf("key %s of node %d: node %d answers %d, %v; want MOVED", k, i, j, n, err)
			}
		}
	}

	const victim = 1
	c.StopMaster(victim)
	c.StopMaster(victim) // a no-op
	if err := nodes[victim].Ping(ctx).Err(); err == nil {
		t.Fatal("a stopped master answers PING")
	}
	c.WaitFailed(victim)
	// A client that gives up on the stopped master soon.
	quick := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 1, DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	defer quick.Close()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := quick.Get(short, byNode[victim]).Err(); err == nil {
		t.Fatalf("GET of a key of the stopped master succeeded")
	}
	for _, i := range []int{0, 2} {
		if v, err := quick.Get(ctx, byNode[i]).Result(); err != nil || v != "v" {
			t.Fatalf("node %d, after master %d stopped: GET = %q, %v", i, victim, v, err)
		}
		if v, err := cc.Get(ctx, byNode[i]).Result(); err != nil || v != "v" {
			t.Fatalf("node %d, after master %d stopped: GET = %q, %v", i, victim, v, err)
		}
	}
}

// TestKeySlot: known slots from the Redis Cluster specification.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]int{
		"123456789":                12739, // CRC16/XMODEM check value 0x31C3 mod 16384
		"{user1000}.following":     KeySlot("user1000"),
		"{user1000}.followers":     KeySlot("user1000"),
		"foo{}{bar}":               KeySlot("foo{}{bar}"),
		"foo{{bar}}zap":            KeySlot("{bar"),
		"foo{bar}{zap}":            KeySlot("bar"),
		"test:a:{GET /x ip:1.2.3}": KeySlot("GET /x ip:1.2.3"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
}
