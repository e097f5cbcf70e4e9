package ginlimit

import (
	"strconv"
	"testing"
)

func TestDenyCacheBoundedAndExpiring(t *testing.T) {
	t.Parallel()
	if newDenyCache(0) != nil {
		t.Fatal("DenyCache(0) made a cache")
	}
	c := newDenyCache(64)
	for i := range 10_000 {
		c.put("k"+strconv.Itoa(i), denyEntry{until: 100}, 0)
		if n := c.len(); n > 64 {
			t.Fatalf("after %d puts the cache holds %d entries, want at most 64", i+1, n)
		}
	}
	c.put("x", denyEntry{until: 100, resetAt: 7}, 0)
	if e, ok := c.get("x", 99); !ok || e.resetAt != 7 {
		t.Fatalf("get before the deadline: %+v, %v", e, ok)
	}
	if _, ok := c.get("x", 100); ok {
		t.Fatal("get at the deadline still answered")
	}
	if _, ok := c.get("never", 0); ok {
		t.Fatal("get of an absent key answered")
	}
	// A full shard drops expired entries before live ones.
	c = newDenyCache(denyShards) // one entry per shard
	c.put("old", denyEntry{until: 10}, 0)
	s := c.shard("old")
	for i := 0; ; i++ {
		k := "new" + strconv.Itoa(i)
		if c.shard(k) == s {
			c.put(k, denyEntry{until: 1000}, 50)
			if _, ok := c.get(k, 60); !ok {
				t.Fatal("the live entry was not stored")
			}
			break
		}
	}
}
