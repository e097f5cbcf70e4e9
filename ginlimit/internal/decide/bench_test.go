package decide

import (
	"context"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// BenchmarkDenyCacheHit is a rejection answered in process.
func BenchmarkDenyCacheHit(b *testing.B) {
	c := rule.Route{DenySize: 10_000, Staleness: time.Hour}.DenyCache(false)
	const key = "rate_limit:{GET /api/coupon/claim user:alice}"
	c.Leave(key, c.Stamp(), state.Answer{Remaining: 0, Reset: time.Hour, At: time.Now()})
	r := &rule.Rate{Base: rule.Base{Name: "x", Limit: 1}, MaxCost: 1, Cost: 1, Deny: c}
	p := &Route{Rules: []*rule.Rate{r}, records: 1}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := p.newRequest(rule.Scope{})
			cl := &req.calls[0]
			*cl = call{rule: r}
			cl.key, cl.cost = key, 1
			req.place(0)
			if d, _ := req.decide(ctx); !d.Cached {
				b.Fatal("not cached")
			}
		}
	})
}
