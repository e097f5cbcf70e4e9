package lua_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/lua"
	"github.com/ginlimit/ginlimit/lua/internal/luagen"
)

func init() {
	lua.SeveralNumbered = func(names ...string) (string, error) {
		return luagen.Several(os.DirFS("."), false, names...)
	}
}

// TestGeneratedUpToDate regenerates the scripts in memory and compares
// them, byte for byte, with the committed files in gen/ that package lua
// embeds: they must be what the hand-written files make.
func TestGeneratedUpToDate(t *testing.T) {
	t.Parallel()
	files, err := luagen.Files(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := filepath.Glob(filepath.Join("gen", "*.lua"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range committed {
		if _, ok := files[filepath.Base(path)]; !ok {
			t.Errorf("%s is committed but not generated: run go generate ./lua", path)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("gen", name))
		if err != nil {
			t.Errorf("gen/%s: %v: run go generate ./lua", name, err)
			continue
		}
		if string(got) != want {
			t.Errorf("gen/%s is out of date (%s): run go generate ./lua", name, firstDiff(string(got), want))
		}
	}
	if lua.Several() != files["several.lua"] || lua.Peek() != files["peek.lua"] {
		t.Error("lua.Several or lua.Peek is not the generated script")
	}
}

// firstDiff names the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d is %q, want %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// TestSinglePlaceholders: each single-rule script has each of its
// settings' placeholders once, in its first line of code after the
// comments, so that lua.Single's replacement is all there is to review.
func TestSinglePlaceholders(t *testing.T) {
	t.Parallel()
	for _, alg := range lua.Algorithms() {
		b, err := os.ReadFile(filepath.Join("gen", "single_"+alg+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		line := "local window, limit, param, settings_bad = @WINDOW@, @LIMIT@, @PARAM@, @SETTINGS_BAD@\n"
		for _, p := range []string{"@WINDOW@", "@LIMIT@", "@PARAM@", "@SETTINGS_BAD@"} {
			if strings.Count(src, p) != 1 || !strings.Contains(src, line) {
				t.Errorf("single_%s.lua: want its placeholder %s once, in %q", alg, p, line)
			}
		}
		var code string
		for l := range strings.Lines(src) {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				code = l
				break
			}
		}
		if code != line {
			t.Errorf("single_%s.lua's first line of code is %q, want %q", alg, code, line)
		}
	}
}

// TestInFlightLayout: inflight.lua, written by hand, reads its arguments
// and writes its acquire reply where package lua's InFlight constants say
// (Lua counts from 1: key i's limit is ARGV[InFlightArgRules +
// InFlightArgsPerRule*(i-1) + InFlightArgLimit + 1]).
func TestInFlightLayout(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("inflight.lua")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	per, rules := lua.InFlightArgsPerRule, lua.InFlightArgRules
	at := func(field int) string { return fmt.Sprintf("ARGV[%d + %d * i]", rules-per+field+1, per) }
	for _, want := range []string{
		fmt.Sprintf("#ARGV ~= %d + %d * n", rules, per),
		fmt.Sprintf("local op, holder = ARGV[%d], ARGV[%d]", lua.InFlightArgOp+1, lua.InFlightArgHolder+1),
		fmt.Sprintf("if ARGV[%d] ~= '' then", lua.ArgClock+1),
		"tonumber(" + at(lua.InFlightArgLimit) + "), tonumber(" + at(lua.InFlightArgLease) + ")",
		fmt.Sprintf("reply[%d + i] = live", lua.ReplyHead+lua.InFlightInUse), // one integer per key
		fmt.Sprintf("reply[%d] == 0", lua.ReplyFired+1),
	} {
		if !strings.Contains(src, want) {
			t.Errorf("inflight.lua has no %q: its layout and package lua's InFlight constants disagree", want)
		}
	}
	if lua.InFlightPerRule != 1 || !slices.Equal([]int{lua.ReplyNow, lua.ReplyFired}, []int{0, 1}) || !strings.Contains(src, "local reply = {now, 0}") {
		t.Error("inflight.lua's reply is not {now, fired, then one integer per key} as package lua's constants say")
	}
}
