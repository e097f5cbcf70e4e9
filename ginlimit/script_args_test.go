package ginlimit

import (
	"slices"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/lua"
)

// TestScriptArgs: a rule's several-rule arguments number its algorithm as
// the scripts do (by name, in lua.Numbered), whatever the order of
// AlgorithmKind's constants, and put each setting and the cost where
// package lua's offsets say.
func TestScriptArgs(t *testing.T) {
	t.Parallel()
	kinds := []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket, penaltyAlg}
	for _, a := range kinds {
		args := ruleArgs(a, 3*time.Second, 7, 9)
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
	r := &rule{settings: ruleArgs(FixedWindow, time.Second, 5, 0)}
	p := &Policy{clock: func() int64 { return 42 }}
	args := p.severalArgs(&request{calls: []call{{rule: r, cost: 2}, {rule: r, cost: 3}}})
	if len(args) != lua.ArgRules+2*lua.ArgsPerRule || args[lua.ArgClock] != int64(42) ||
		args[lua.ArgRules+lua.ArgCost] != 2 || args[lua.ArgRules+lua.ArgsPerRule+lua.ArgCost] != 3 {
		t.Errorf("severalArgs = %v", args)
	}
	if s := singleArgs("", 4); s[lua.ArgClock] != "" || s[lua.SingleArgCost] != 4 || len(s) != lua.SingleArgs {
		t.Errorf("singleArgs = %v", s)
	}
}
