package ginlimit

// Configuration mistakes that must fail at start-up, naming what is wrong:
// a nil option, dimensions no Target could tell apart, and a sliding log
// beyond its limit or window.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/lua"
)

// panicText runs f and returns the text of its panic, or "" if it did not
// panic.
func panicText(f func()) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// TestNilOptionIsAConfigurationError: a nil Option (a nil entry of an
// []Option built by the application, say) is reported like any other
// invalid option, naming it: New and Limiter.Policy return an error,
// Limiter.RateLimit and the package-level RateLimit panic with a message
// that says which option, and a nil RuleOption inside a Rule is the same.
// Before, each dereferenced the nil interface: New panicked instead of
// returning its error, and every panic was a bare "invalid memory address
// or nil pointer dereference".
func TestNilOptionIsAConfigurationError(t *testing.T) {
	_, rdb := newMini(t)
	l, err := New(Redis(rdb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })

	var newErr error
	if s := panicText(func() { _, newErr = New(Redis(rdb), nil) }); s != "" {
		t.Fatalf("New(Redis(rdb), nil) panicked: %s; want an error", s)
	}
	if newErr == nil || !strings.Contains(newErr.Error(), "option 2 is nil") {
		t.Errorf("New(Redis(rdb), nil) = %v; want an error naming option 2 as nil", newErr)
	}
	var polErr error
	if s := panicText(func() { _, polErr = l.Policy(Limit(3), nil) }); s != "" || polErr == nil || !strings.Contains(polErr.Error(), "option 2 is nil") {
		t.Errorf("Limiter.Policy(Limit(3), nil): panic %q, error %v; want an error naming option 2 as nil", s, polErr)
	}
	for name, f := range map[string]func(){
		"Limiter.RateLimit(nil)":             func() { l.RateLimit(nil) },
		"RateLimit(l, nil)":                  func() { RateLimit(l, nil) },
		"RateLimit(nil)":                     func() { RateLimit(nil) },
		"RateLimit(l, Rule(Name(a), nil))":   func() { RateLimit(l, Rule(Name("a"), nil)) },
		"Limiter.RateLimit(Rule(nil, Name))": func() { l.RateLimit(Rule(nil, Name("a"))) },
	} {
		s := panicText(f)
		if s == "" || strings.Contains(s, "nil pointer") || !strings.Contains(s, " is nil") {
			t.Errorf("%s panicked with %q; want a panic naming the nil option", name, s)
		}
	}
}

// TestDimensionsSharingAValueNameAreRefused: Target.Values is keyed by the
// name a ByParam, ByHeader or ByFunc dimension was given, so two of them
// with one name on a rule (ByParam("id") and ByFunc("id", f)) would make a
// count that no Target can name: Peek and Reset always answered
// ErrBadTarget, saying the Values named a dimension the rule does not
// count per. The rule is refused at start-up instead, naming both.
func TestDimensionsSharingAValueNameAreRefused(t *testing.T) {
	_, rdb := newMini(t)
	l, err := New(Redis(rdb), Timeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	fx := ByFunc("id", func(c *gin.Context) (string, bool) { return c.GetHeader("X-F"), true })
	for _, dims := range [][]Dimension{
		{ByParam("id"), fx},
		{ByParam("X-Id"), ByHeader("x-id")},
		{ByHeader("X-Id"), ByFunc("X-Id", func(*gin.Context) (string, bool) { return "v", true })},
	} {
		p, err := l.Policy(Key(prefix(t)), Per(dims...))
		if err == nil {
			// What it was: a count no Target reaches.
			_, perr := p.Peek(context.Background(), Target{Route: "GET /v/:id", Values: map[string]string{dims[0].dimension().Name: "7"}})
			t.Errorf("Per(%s, %s) compiled; its Peek says %v", dims[0].dimension().Describe(), dims[1].dimension().Describe(), perr)
			continue
		}
		if !strings.Contains(err.Error(), "Target.Values") {
			t.Errorf("Per(%s, %s): %v; want an error that says the two share a Target.Values name", dims[0].dimension().Describe(), dims[1].dimension().Describe(), err)
		}
	}
	// Distinct names, and the built-in dimensions, still go together.
	if _, err := l.Policy(Key(prefix(t)), Per(IP, ByParam("id"), ByHeader("X-K"), ByFunc("f", func(*gin.Context) (string, bool) { return "v", true }))); err != nil {
		t.Errorf("distinct names refused: %v", err)
	}
}

// TestSlidingLogBoundsAreRefusedAtStartUp: a sliding log keeps 4 bytes per
// unit in its window, as milliseconds from a base: a limit above
// lua.MaxLogLimit or a window above lua.MaxLogWindow is refused at start-up
// with an error that names the option, never silently served another way;
// the bounds themselves are accepted, and a SlidingCounter takes both.
func TestSlidingLogBoundsAreRefusedAtStartUp(t *testing.T) {
	_, rdb := newMini(t)
	l, err := New(Redis(rdb), Timeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	longest := lua.MaxLogWindow * time.Microsecond
	for _, tc := range []struct {
		name string
		opts []Option
		want string // in the error; "" for none
	}{
		{"limit above", []Option{Limit(lua.MaxLogLimit + 1)}, "Limit(100001): a SlidingLog"},
		{"window above", []Option{Window(25 * 24 * time.Hour)}, "Window(600h0m0s): a SlidingLog"},
		{"explicit algorithm", []Option{Algorithm(SlidingLog), Limit(lua.MaxLogLimit + 1)}, "Limit(100001): a SlidingLog"},
		{"a rule of several", []Option{Rule(Name("a"), Limit(5)), Rule(Name("b"), Window(25*24*time.Hour))}, "Window(600h0m0s): a SlidingLog"},
		{"the largest limit", []Option{Limit(lua.MaxLogLimit)}, ""},
		{"the longest window", []Option{Window(longest)}, ""},
		{"counter, limit", []Option{Algorithm(SlidingCounter), Limit(lua.MaxLogLimit + 1)}, ""},
		{"counter, window", []Option{Algorithm(SlidingCounter), Window(25 * 24 * time.Hour)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, newErr := New(append([]Option{Redis(rdb), Key(prefix(t))}, tc.opts...)...)
			_, polErr := l.Policy(append([]Option{Key(prefix(t))}, tc.opts...)...)
			for what, err := range map[string]error{"New": newErr, "Limiter.Policy": polErr} {
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s: %v; want it accepted", what, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: %v; want an error with %q", what, err, tc.want)
				}
			}
		})
	}
}
