package ginlimit

import (
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/gobuild"
)

// TestRouteOptionsInRuleDoNotCompile: a route option inside Rule(...) is a
// compile error, not a runtime check. A program with one such line per
// route option is compiled with `go build` (through an overlay, so nothing
// is written into the module), and every one of those lines, and no other,
// must fail; rule options on the control lines must compile.
func TestRouteOptionsInRuleDoNotCompile(t *testing.T) {
	routeOnly := []string{
		"ginlimit.Redis(nil)", "ginlimit.Timeout(time.Second)", "ginlimit.OnFailure(ginlimit.FailClosed)",
		"ginlimit.LocalInstances(2)", "ginlimit.DenyCache(0)", "ginlimit.Shadow(true)",
		"ginlimit.Headers(ginlimit.HeadersNone)", "ginlimit.Respond(nil)", "ginlimit.Observe(nil)", "ginlimit.Rule()",
		"(*ginlimit.Limiter)(nil)",
	}
	ruleOK := []string{
		"ginlimit.Key(\"k:\")", "ginlimit.Name(\"n\")", "ginlimit.Window(time.Second)", "ginlimit.Limit(1)",
		"ginlimit.Message(\"m\")", "ginlimit.Type(ginlimit.IP)", "ginlimit.Algorithm(ginlimit.TokenBucket)",
		"ginlimit.Burst(2)", "ginlimit.Cost(nil)", "ginlimit.Per(ginlimit.User, ginlimit.ByParam(\"id\"))",
		"ginlimit.LimitBy(nil, nil)", "ginlimit.Ban(1, time.Second, time.Second)", "ginlimit.InFlight(1, time.Second)", "ginlimit.IPIdentity(nil)", "ginlimit.UserIdentity(nil)",
		"ginlimit.HashIdentities(nil)", "ginlimit.Type(ginlimit.UserOrIP)",
	}
	var src strings.Builder
	src.WriteString("package compilecheck\n\nimport (\n\t\"log/slog\"\n\t\"time\"\n\n\t\"github.com/ginlimit/ginlimit/ginlimit\"\n)\n\n")
	src.WriteString("var _ = slog.Default\nvar _ = time.Second\n\n")
	want := map[int]string{} // by line number
	for _, o := range routeOnly {
		want[strings.Count(src.String(), "\n")+1] = o
		fmt.Fprintf(&src, "var _ = ginlimit.Rule(%s)\n", o)
	}
	for _, o := range ruleOK {
		fmt.Fprintf(&src, "var _ = ginlimit.Rule(%s)\n", o)
	}
	outs, errs := gobuild.Build(t, "zz_compilecheck", src.String())
	out := outs[0]
	if errs[0] == nil {
		t.Fatalf("the program compiled; want an error on each of %d lines:\n%s", len(want), src.String())
	}
	failed := map[int]bool{}
	for _, m := range regexp.MustCompile(`p0\.go:(\d+):\d+: (.*)`).FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[1])
		if _, ok := want[n]; !ok {
			t.Errorf("line %d failed, which should compile: %s", n, m[2])
		}
		if !strings.Contains(m[2], "RuleOption") {
			t.Errorf("line %d failed for another reason: %s", n, m[2])
		}
		failed[n] = true
	}
	for n, o := range want {
		if !failed[n] {
			t.Errorf("Rule(%s) compiled; want a compile error", o)
		}
	}
	if t.Failed() {
		t.Logf("go build said:\n%s", out)
	}
}

// TestTestOnlyRouteOptionsAreNotRuleOptions: the unexported options that
// tests use keep the same split. A route option is not a RuleOption (so
// Rule does not take it), and subWindows, a rule option, is one.
func TestTestOnlyRouteOptionsAreNotRuleOptions(t *testing.T) {
	for name, o := range map[string]Option{
		"queueTimeout": queueTimeout(time.Second), "maxStaleness": maxStaleness(time.Second),
		"withBreaker": withBreaker(0, 0), "autoPipeline": autoPipeline(true), "withLogger": withLogger(slog.Default()),
	} {
		if _, ok := o.(RuleOption); ok {
			t.Errorf("%s is a RuleOption; want a route option", name)
		}
	}
	if _, ok := Option(subWindows(2)).(RuleOption); !ok {
		t.Errorf("subWindows is not a RuleOption")
	}
}
