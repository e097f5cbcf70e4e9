package decide

import (
	"slices"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
)

// TestSeveralArgs: the several-rule script's arguments put each record's
// settings and cost where package lua's offsets say, a Ban's record before
// its rule's (see ginlimit's TestScriptArgs for the settings themselves).
func TestSeveralArgs(t *testing.T) {
	t.Parallel()
	r := &rule.Rate{Settings: rule.Args("fixed_window", time.Second, 5, 0)}
	p := &Route{Config: Config{Clock: func() int64 { return 42 }}}
	req := &request{p: p, calls: make([]call, 2), keys: make([]string, 2)}
	for i, cost := range []int{2, 3} {
		req.calls[i] = call{rule: r}
		req.calls[i].cost = cost
		req.place(i)
	}
	args := req.severalArgs()
	if len(args) != lua.ArgRules+2*lua.ArgsPerRule || args[lua.ArgClock] != int64(42) ||
		args[lua.ArgRules+lua.ArgCost] != 2 || args[lua.ArgRules+lua.ArgsPerRule+lua.ArgCost] != 3 {
		t.Errorf("severalArgs = %v", args)
	}
	// A rule's Ban takes the record before the rule's own, with its own
	// settings and its cost (the strikes it reports).
	rb := &rule.Rate{Settings: r.Settings, Ban: &rule.Ban{Settings: rule.Args("penalty", time.Minute, 3, 60000)}}
	req = &request{p: p}
	req.alloc([]*rule.Rate{r, rb}, r.Records()+rb.Records())
	req.calls[0] = call{rule: r}
	req.calls[0].cost = 2
	req.place(0)
	req.calls[1] = call{rule: rb, ban: req.calls[1].ban}
	req.calls[1].cost, req.calls[1].ban.cost = 3, 7
	req.place(1)
	args = req.severalArgs()
	ban := lua.ArgRules + lua.ArgsPerRule
	if len(args) != lua.ArgRules+3*lua.ArgsPerRule || args[lua.ArgRules+lua.ArgCost] != 2 ||
		args[ban+lua.ArgCost] != 7 || args[ban+lua.ArgAlgorithm] != slices.Index(lua.Numbered(), "penalty") || args[ban+lua.ArgParam] != 60000 ||
		args[ban+lua.ArgsPerRule+lua.ArgCost] != 3 || args[ban+lua.ArgsPerRule+lua.ArgAlgorithm] != args[lua.ArgRules+lua.ArgAlgorithm] {
		t.Errorf("severalArgs with a Ban = %v", args)
	}
	if req.rec(0) != 0 || req.rec(1) != 2 || !slices.Equal(req.keys, []string{"", "", ""}) {
		t.Errorf("records %d and %d (its ban's the one before), keys %q", req.rec(0), req.rec(1), req.keys)
	}
}
