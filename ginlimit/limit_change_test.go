package ginlimit

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// What a live change of a limit does to the count, on a real redis-server:
// a cut never hands out budget, and a raise gives at most the difference
// (docs/operations.md, "Limits that change at run time").

// changeWindow is the window of these tests: long enough that no unit
// leaves it, no token comes back and no fixed window ends while a test
// runs on a loaded machine (a boundary of the fixed window falls on a
// multiple of it since the Unix epoch).
const changeWindow = 7 * 24 * time.Hour

// changeStep is one step of a test: set the limit (0 clears the override)
// of target, then make tries claims and count those admitted.
type changeStep struct {
	target Target
	limit  int
	tries  int
	want   int
}

// runChange runs steps on in for user in plan (none for ""), and reports
// every step whose admitted count is not its want.
func runChange(t *testing.T, in *instance, user, plan string, steps []changeStep) {
	t.Helper()
	ctx := context.Background()
	total := 0
	for i, s := range steps {
		if i > 0 { // the first step spends under the configured limit
			if err := in.policy.SetLimit(ctx, s.target, s.limit, 0); err != nil {
				t.Fatal(err)
			}
		}
		admitted := 0
		for range s.tries {
			if code, _ := in.claimAs(user, plan); code == http.StatusOK {
				admitted++
			}
		}
		total += admitted
		if admitted != s.want {
			t.Errorf("step %d (limit %d for %+v): admitted %d of %d, want %d (%d in all so far)", i, s.limit, s.target, admitted, s.tries, s.want, total)
		}
	}
}

// changeAlgorithms are the algorithms every test here runs on.
var changeAlgorithms = []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket}

// TestALimitChangeKeepsWhatWasSpent: for every algorithm, and an override
// of the rule, of a plan, of an identity and of an identity in a plan, a
// client that spent 3 of 10 gets 2 more under a cut to 5, 7 more under a
// raise to 12 (the difference), and nothing under a cut to 2.
func TestALimitChangeKeepsWhatWasSpent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	alice := Target{Route: claimRoute, User: "alice"}
	for _, alg := range changeAlgorithms {
		for _, of := range []struct {
			name   string
			plan   string
			target Target
		}{
			{"rule", "", Target{Route: claimRoute}},
			{"plan", "pro", Target{Route: claimRoute, Plan: "pro"}},
			{"identity", "", alice},
			{"identity in a plan", "pro", alice},
		} {
			t.Run(fmt.Sprintf("%s/%s", alg, of.name), func(t *testing.T) {
				t.Parallel()
				in := newInstance(t, srv.Client(), Key(prefix(t)), Algorithm(alg), Limit(10), Window(changeWindow), Type(User),
					LimitBy(planOf, map[string]int{"pro": 10}))
				runChange(t, in, "alice", of.plan, []changeStep{
					{tries: 3, want: 3},
					{target: of.target, limit: 5, tries: 10, want: 2},
					{target: of.target, limit: 12, tries: 10, want: 7},
					{target: of.target, limit: 2, tries: 10, want: 0},
				})
			})
		}
	}
}

// TestACutThroughEveryLevelHandsOutNothing: the sequences. A
// client that spent its 10 gets nothing when the rule is cut to 5, then
// nothing when its own limit is cut to 2, nor when that override is
// cleared again; a pro client that spent its plan's 10 gets nothing when
// the plan is cut to 3, nor when its own limit is cut to 3.
func TestACutThroughEveryLevelHandsOutNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	alice := Target{Route: claimRoute, User: "alice"}
	for _, alg := range changeAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			in := newInstance(t, srv.Client(), Key(prefix(t)), Algorithm(alg), Limit(10), Window(changeWindow), Type(User),
				LimitBy(planOf, map[string]int{"pro": 10}))
			runChange(t, in, "alice", "", []changeStep{
				{tries: 12, want: 10},
				{target: Target{Route: claimRoute}, limit: 5, tries: 10, want: 0},
				{target: alice, limit: 2, tries: 10, want: 0},
				{target: alice, limit: 0, tries: 10, want: 0},
			})
			runChange(t, in, "bob", "pro", []changeStep{
				{tries: 12, want: 10},
				{target: Target{Route: claimRoute, Plan: "pro"}, limit: 3, tries: 10, want: 0},
				{target: Target{Route: claimRoute, User: "bob"}, limit: 3, tries: 10, want: 0},
			})
		})
	}
}

// TestALongerWindowKeepsWhatWasSpent: a client that spent its 10 gets
// nothing when the window is doubled (half the rate), whatever the
// algorithm: the sliding counter's override keeps its sub-window length,
// so it counts on the rule's key, as every other algorithm's does.
func TestALongerWindowKeepsWhatWasSpent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range changeAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			in := newInstance(t, srv.Client(), Key(prefix(t)), Algorithm(alg), Limit(10), Window(changeWindow), Type(User))
			ctx := context.Background()
			admitted := func(tries int) (n int) {
				for range tries {
					if code, _ := in.claimAs("alice", ""); code == http.StatusOK {
						n++
					}
				}
				return n
			}
			if n := admitted(12); n != 10 {
				t.Fatalf("admitted %d of 12 under the configured 10, want 10", n)
			}
			if err := in.policy.SetLimit(ctx, Target{Route: claimRoute}, 10, 2*changeWindow); err != nil {
				t.Fatal(err)
			}
			if n := admitted(10); n != 0 {
				t.Errorf("admitted %d of 10 more with the window doubled, want 0", n)
			}
		})
	}
}
