package state

import (
	"strconv"
	"testing"
)

// TestShardsEvictKeepsBusyKeys: an eviction drops the stale keys it looks
// at, then one idle key if the part is still full, and never a busy one.
func TestShardsEvictKeepsBusyKeys(t *testing.T) {
	t.Parallel()
	s := NewShards[string](numShards * 4) // 4 keys per part
	p := s.Shard("x")
	p.Lock()
	defer p.Unlock()
	for i := range 4 {
		p.Put("busy"+strconv.Itoa(i), "busy")
	}
	if !p.Full() {
		t.Fatal("a part holding its bound is not full")
	}
	judge := func(_ string, v string) Pick {
		switch v {
		case "stale":
			return Stale
		case "idle":
			return Idle
		}
		return Busy
	}
	p.Evict(judge)
	if p.Len() != 4 {
		t.Fatalf("busy keys evicted: %d left of 4", p.Len())
	}
	p.Put("idle", "idle")
	p.Evict(judge)
	if _, ok := p.Get("idle"); ok || p.Len() != 4 {
		t.Fatalf("over its bound with one idle key, the part kept it (%d keys)", p.Len())
	}
	p.Delete("busy0")
	p.Delete("busy1")
	p.Put("stale", "stale")
	p.Put("idle", "idle")
	p.Evict(judge)
	if _, ok := p.Get("stale"); ok {
		t.Fatal("a stale key survived an eviction")
	}
	if _, ok := p.Get("idle"); !ok {
		t.Fatal("an idle key was evicted though dropping the stale one made room")
	}
}

// TestShardsUnbounded: a map made for 0 keys is never full.
func TestShardsUnbounded(t *testing.T) {
	t.Parallel()
	s := NewShards[int](0)
	for i := range 1000 {
		p := s.Shard(strconv.Itoa(i))
		p.Lock()
		if p.Full() {
			p.Unlock()
			t.Fatalf("an unbounded part is full at %d keys", i)
		}
		p.Put(strconv.Itoa(i), i)
		p.Unlock()
	}
	if n := s.Len(); n != 1000 {
		t.Fatalf("Len %d, want 1000", n)
	}
	s.Delete("7")
	if n := s.Len(); n != 999 {
		t.Fatalf("Len after Delete %d, want 999", n)
	}
	s.Clear()
	if n := s.Len(); n != 0 {
		t.Fatalf("Len after Clear %d, want 0", n)
	}
}
