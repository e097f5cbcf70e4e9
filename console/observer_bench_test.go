package console

import (
	"context"
	"testing"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// BenchmarkObserve is what the console adds to each decision: an admitted
// request's count, from every core at once.
func BenchmarkObserve(b *testing.B) {
	o := NewObserver()
	e := ginlimit.Event{Route: "GET /api/x", Rule: "x", Outcome: ginlimit.OutcomeAllowed}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.observe(context.Background(), e)
		}
	})
}
