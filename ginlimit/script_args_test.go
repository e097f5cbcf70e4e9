package ginlimit

import (
	"slices"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
)

// TestScriptArgs: a rule's several-rule arguments number its algorithm as
// the scripts do (by name, in lua.Numbered), whatever the order of
// AlgorithmKind's constants, and put each setting and the cost where
// package lua's offsets say.
func TestScriptArgs(t *testing.T) {
	t.Parallel()
	kinds := []string{string(SlidingLog), string(SlidingCounter), string(FixedWindow), string(TokenBucket), "penalty"}
	for _, a := range kinds {
		args := rule.Args(a, 3*time.Second, 7, 9)
		if n, ok := args[lua.ArgAlgorithm].(int); !ok || n < 0 || lua.Numbered()[n] != string(a) {
			t.Errorf("%v: algorithm number %v, want %q's in %v", a, args[lua.ArgAlgorithm], a, lua.Numbered())
		}
		if args[lua.ArgWindow] != int64(3e6) || args[lua.ArgLimit] != 7 || args[lua.ArgParam] != 9 || len(args) != lua.ArgsPerRule {
			t.Errorf("%v: settings %v", a, args)
		}
	}
	if got := len(slices.Compact(slices.Clone(lua.Numbered()))); got != len(kinds) {
		t.Errorf("lua numbers %d algorithms, ginlimit %d", got, len(kinds))
	}
	r := &rule.Rate{Settings: rule.Args(string(FixedWindow), time.Second, 5, 0)}
	p := &Policy{clock: func() int64 { return 42 }}
	req := &request{calls: make([]call, 2), keys: make([]string, 2)}
	for i, cost := range []int{2, 3} {
		req.calls[i] = call{rule: r}
		req.calls[i].cost = cost
		req.place(i)
	}
	args := p.severalArgs(req)
	if len(args) != lua.ArgRules+2*lua.ArgsPerRule || args[lua.ArgClock] != int64(42) ||
		args[lua.ArgRules+lua.ArgCost] != 2 || args[lua.ArgRules+lua.ArgsPerRule+lua.ArgCost] != 3 {
		t.Errorf("severalArgs = %v", args)
	}
	// A rule's Ban takes the record before the rule's own, with its own
	// settings and its cost (the strikes it reports).
	rb := &rule.Rate{Settings: r.Settings, Ban: &rule.Ban{Settings: rule.Args("penalty", time.Minute, 3, 60000)}}
	req = &request{}
	req.alloc([]*rule.Rate{r, rb}, r.Records()+rb.Records())
	req.calls[0] = call{rule: r}
	req.calls[0].cost = 2
	req.place(0)
	req.calls[1] = call{rule: rb, ban: req.calls[1].ban}
	req.calls[1].cost, req.calls[1].ban.cost = 3, 7
	req.place(1)
	args = p.severalArgs(req)
	ban := lua.ArgRules + lua.ArgsPerRule
	if len(args) != lua.ArgRules+3*lua.ArgsPerRule || args[lua.ArgRules+lua.ArgCost] != 2 ||
		args[ban+lua.ArgCost] != 7 || args[ban+lua.ArgAlgorithm] != slices.Index(lua.Numbered(), "penalty") || args[ban+lua.ArgParam] != 60000 ||
		args[ban+lua.ArgsPerRule+lua.ArgCost] != 3 || args[ban+lua.ArgsPerRule+lua.ArgAlgorithm] != args[lua.ArgRules+lua.ArgAlgorithm] {
		t.Errorf("severalArgs with a Ban = %v", args)
	}
	if req.rec(0) != 0 || req.rec(1) != 2 || !slices.Equal(req.keys, []string{"", "", ""}) {
		t.Errorf("records %d and %d (its ban's the one before), keys %q", req.rec(0), req.rec(1), req.keys)
	}
	if s := rule.SingleArgs("", 4); s[lua.ArgClock] != "" || s[lua.SingleArgCost] != 4 || len(s) != lua.SingleArgs {
		t.Errorf("singleArgs = %v", s)
	}
}
