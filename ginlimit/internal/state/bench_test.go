package state

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkDenyCacheReject is a certain rejection answered by the cache
// alone: it must not allocate.
func BenchmarkDenyCacheReject(b *testing.B) {
	c := NewDenyCache(DenyConfig{Size: 10_000, Staleness: time.Hour, ExactBelow: 64})
	const key = "rate_limit:{GET /api/coupon/claim user:alice}"
	c.Leave(key, c.Stamp(), Answer{Remaining: 0, Reset: time.Hour, At: time.Now()})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if t := c.Enter(key, 1); t.Verdict != Reject || t.Answer().Remaining != 0 {
				b.Fatal("not rejected")
			}
		}
	})
}

// BenchmarkDenyCacheLearn is a call counted in flight and its answer kept,
// over more keys than the cache holds, so that parts fill and evict: it
// allocates only the state of a key it inserts.
func BenchmarkDenyCacheLearn(b *testing.B) {
	c := NewDenyCache(DenyConfig{Size: 1_000, Staleness: time.Hour, ExactBelow: 64})
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		key := keys[i%len(keys)]
		i++
		t := c.Enter(key, 1)
		if t.Verdict == Send {
			c.Leave(key, t.Ticket, Answer{Remaining: 5, Reset: time.Hour, At: time.Now()})
		}
	}
}
