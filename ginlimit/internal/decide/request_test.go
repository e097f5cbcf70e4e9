package decide

import (
	"testing"
	"unsafe"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// TestRequestSize: a request, the memory of one decision, stays within 512
// bytes. Past that, Go's allocator gives each object a malloc header of its
// own, and the hot paths pay for it at the same allocation count
// (BenchmarkDenyCacheHit, BenchmarkMiddleware): keep what only some
// routes need (a Ban's share, the in-flight step's slots) out of it.
func TestRequestSize(t *testing.T) {
	if size := unsafe.Sizeof(request{}); size > 512 {
		t.Errorf("a request is %d bytes, more than 512: each one now carries a malloc header, which the hot paths measurably pay for (BenchmarkDenyCacheHit, BenchmarkMiddleware)", size)
	}
}

// TestRequestAllocations: the memory of a decision on one rule without a
// Ban is one allocation; a Ban, or several rules, allocate the calls and
// the keys besides, and a Ban's share costs no allocation of its own.
func TestRequestAllocations(t *testing.T) {
	c := newMini(t)
	for _, tc := range []struct {
		name  string
		named bool
		rules []rule.Config
		want  float64
	}{
		{"one rule", false, []rule.Config{rate("rate_limit:", "", 5, false)}, 1},
		{"one rule with a Ban", false, []rule.Config{rate("rate_limit:", "", 5, true)}, 3},
		{"several rules", true, []rule.Config{rate("rate_limit:", "a", 5, false), rate("rate_limit:", "b", 9, false)}, 3},
		{"several rules with Bans", true, []rule.Config{rate("rate_limit:", "a", 5, true), rate("rate_limit:", "b", 9, false), rate("rate_limit:", "c", 7, true)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRoute(t, c, tc.named, 10_000, tc.rules...)
			var req *request
			if n := leastAllocs(100, func() { req = p.newRequest(rule.Scope{Route: "k"}) }); n != tc.want {
				t.Errorf("newRequest makes %v allocations, want %v", n, tc.want)
			}
			for i, r := range p.Rules {
				req.setCall(i, r, nil, 1)
				if (req.calls[i].ban != nil) != (r.Ban != nil) || req.keys[req.rec(i)] != req.calls[i].key {
					t.Errorf("call %d: Ban's share %v for a rule with Ban %v; keys %q", i, req.calls[i].ban, r.Ban, req.keys)
				}
			}
		})
	}
}
