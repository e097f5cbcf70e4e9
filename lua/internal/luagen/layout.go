package luagen

import (
	"fmt"
	"strings"

	"github.com/ginlimit/ginlimit/lua"
)

// A constant is one Lua local of a driver's layout: its name, its value,
// and the expression in package lua's constants that gives it, which the
// generated line quotes.
type constant struct {
	name  string
	value int
	from  string
}

// singleLayout is the single-rule driver's: the positions of its
// arguments, from 1 as Lua counts.
var singleLayout = [][]constant{
	{{"ARG_CLOCK", lua.ArgClock + 1, "lua.ArgClock + 1"}, {"SINGLE_ARG_COST", lua.SingleArgCost + 1, "lua.SingleArgCost + 1"}},
	{{"SINGLE_ARGS", lua.SingleArgs, "lua.SingleArgs"}},
}

// severalLayout is the several-rule driver's: the positions of its
// arguments and of its reply's integers, from 1 as Lua counts, and the
// offsets within one rule's, from 0.
var severalLayout = [][]constant{
	{{"ARG_CLOCK", lua.ArgClock + 1, "lua.ArgClock + 1"}, {"ARG_RULES", lua.ArgRules + 1, "lua.ArgRules + 1"}, {"ARGS_PER_RULE", lua.ArgsPerRule, "lua.ArgsPerRule"}},
	{{"ARG_ALGORITHM", lua.ArgAlgorithm, "lua.ArgAlgorithm"}, {"ARG_WINDOW", lua.ArgWindow, "lua.ArgWindow"}, {"ARG_LIMIT", lua.ArgLimit, "lua.ArgLimit"}},
	{{"ARG_PARAM", lua.ArgParam, "lua.ArgParam"}, {"ARG_COST", lua.ArgCost, "lua.ArgCost"}},
	{{"REPLY_NOW", lua.ReplyNow + 1, "lua.ReplyNow + 1"}, {"REPLY_FIRED", lua.ReplyFired + 1, "lua.ReplyFired + 1"}},
	{{"REPLY_HEAD", lua.ReplyHead, "lua.ReplyHead"}, {"REPLY_PER_RULE", lua.ReplyPerRule, "lua.ReplyPerRule"}},
	{{"REPLY_OK", lua.ReplyOK, "lua.ReplyOK"}, {"REPLY_REMAINING", lua.ReplyRemaining, "lua.ReplyRemaining"}},
	{{"REPLY_RESET", lua.ReplyReset, "lua.ReplyReset"}, {"REPLY_RETRY", lua.ReplyRetry, "lua.ReplyRetry"}},
}

// layout returns the Lua locals of a driver's layout, one line per group.
func layout(groups [][]constant) string {
	var b strings.Builder
	b.WriteString("-- The layout of the arguments and the reply, from package lua's\n-- constants (Lua counts from 1, Go from 0).\n")
	for _, g := range groups {
		names, values, froms := make([]string, len(g)), make([]string, len(g)), make([]string, len(g))
		for i, c := range g {
			names[i], values[i], froms[i] = c.name, fmt.Sprint(c.value), c.from
		}
		fmt.Fprintf(&b, "local %s = %s -- %s\n", strings.Join(names, ", "), strings.Join(values, ", "), strings.Join(froms, ", "))
	}
	return b.String()
}

// checkPacked checks the order that single.lua packs its reply in, the
// cheapest way to reply (no table): now, fired, then ok, remaining, reset
// and retry. The reply's offsets are package lua's constants, so a change
// there must come with one to single.lua's return, and this says so.
func checkPacked() error {
	got := []int{lua.ReplyNow, lua.ReplyFired, lua.ReplyHead, lua.ReplyOK, lua.ReplyRemaining, lua.ReplyReset, lua.ReplyRetry, lua.ReplyPerRule}
	for i, want := range []int{0, 1, 2, 0, 1, 2, 3, 4} {
		if got[i] != want {
			return fmt.Errorf("luagen: single.lua packs its reply as now, fired, ok, remaining, reset, retry, which package lua's Reply constants no longer say: change its return with them")
		}
	}
	return nil
}
