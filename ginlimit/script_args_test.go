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
	if s := rule.SingleArgs("", 4); s[lua.ArgClock] != "" || s[lua.SingleArgCost] != 4 || len(s) != lua.SingleArgs {
		t.Errorf("singleArgs = %v", s)
	}
}
