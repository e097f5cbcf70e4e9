// Package luagen writes the scripts that package lua embeds and Redis runs
// (lua/gen/*.lua) from the hand-written files in lua/: go generate ./lua
// runs it (lua/gen.go), and a test of package lua fails when the committed
// files differ from what it writes.
//
// A script is put together from these files:
//
//   - prologue.lua, the start of every script, after its driver's check of
//     the argument counts: it reads the clock and provides pack and
//     unpack_ints. rule.lua defines int and bad, the checks of a rule's
//     settings that name what is wrong.
//
//   - One file per algorithm and the companion penalty.lua: its comments and
//     helper functions (named after the file, as sliding_log_slow), then
//     four sections, each introduced by a marker line "-- @<section>"
//     (see [sections] for what each reads and assigns).
//
//     A section is statements, not a function: it reads those names (and
//     now, peek, pack and unpack_ints), assigns its results, may leave
//     early with break (it runs inside repeat ... until true; a break
//     inside a loop of its own ends only that loop), never returns,
//     declares no local of a name above, and assigns none it does not own.
//     So the one text runs both inline, in a single-rule script, which then
//     makes no function and calls none on its hot path, and wrapped in a
//     function per section, <name>_<section>(reads) returning what it
//     assigns, in the several-rule scripts.
//
//   - Two drivers, single.lua and several.lua, with marker lines where the
//     generated parts go: "-- @layout" (the offsets of the arguments and
//     the reply, from package lua's constants), "-- prologue.lua", and in
//     single.lua "-- rule.lua" and the four section markers.
package luagen

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/ginlimit/ginlimit/lua"
)

// sections are the parts of an algorithm's file, in the order the file
// gives them, with what each reads (besides now, peek, pack and
// unpack_ints from prologue.lua, and the file's helpers) and what it
// assigns. validate is the algorithm's own argument checks; check reads
// the rule's state and says whether the rule alone admits the request;
// commit records it; report gives what the reply says. a and b are the
// algorithm's state between them (its file says what they are).
var sections = [...]struct{ name, reads, assigns string }{
	{"validate", "window, limit, param, cost", "invalid"},
	{"check", "key, window, limit, param, cost", "ok, a, b"},
	{"commit", "key, window, limit, param, cost, a, b", "a, b"},
	{"report", "key, window, limit, param, cost, ok, admitted, a, b", "remaining, reset, retry"},
}

// Files returns the generated scripts, by file name, from the source files
// in src (the lua/ directory): several.lua, peek.lua, and
// single_<algorithm>.lua for each of lua.Algorithms.
func Files(src fs.FS) (map[string]string, error) {
	s, err := read(src)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, peek := range []bool{false, true} {
		name := "several.lua"
		if peek {
			name = "peek.lua"
		}
		if out[name], err = s.several(peek, lua.Numbered()); err != nil {
			return nil, err
		}
	}
	for _, alg := range lua.Algorithms() {
		if out["single_"+alg+".lua"], err = s.single(alg); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Several returns the several-rule script (peek: the one that records
// nothing) with the algorithms named names numbered in that order, from
// the source files in src. Files numbers them as lua.Numbered does; tests
// number them otherwise, to show that the numbering follows the names.
func Several(src fs.FS, peek bool, names ...string) (string, error) {
	s, err := read(src)
	if err != nil {
		return "", err
	}
	return s.several(peek, names)
}

// sources are the hand-written files, by name without ".lua".
type sources map[string]string

// read reads the drivers, the prologue, rule.lua and every algorithm's
// file from src.
func read(src fs.FS) (sources, error) {
	s := sources{}
	for _, name := range append([]string{"single", "several", "prologue", "rule"}, lua.Numbered()...) {
		b, err := fs.ReadFile(src, name+".lua")
		if err != nil {
			return nil, fmt.Errorf("luagen: %w", err)
		}
		s[name] = string(b)
	}
	return s, nil
}

// algorithmParts is an algorithm's file split at its section markers.
type algorithmParts struct {
	helpers  string // the text before the first section: its comments and helper functions
	sections [len(sections)]string
}

// parts splits the file of the algorithm or companion named name at its
// marker lines "-- @validate", "-- @check", "-- @commit" and "-- @report",
// which must each be there once, in that order.
func (s sources) parts(name string) (algorithmParts, error) {
	rest, ok := s[name]
	if !ok || !slices.Contains(lua.Numbered(), name) {
		return algorithmParts{}, fmt.Errorf("luagen: unknown algorithm %q: want one of %s", name, strings.Join(lua.Numbered(), ", "))
	}
	var p algorithmParts
	for i, sec := range sections {
		before, after, ok := strings.Cut(rest, "\n-- @"+sec.name+"\n")
		if !ok {
			return algorithmParts{}, fmt.Errorf("luagen: %s.lua has no \"-- @%s\" line after its earlier sections", name, sec.name)
		}
		if strings.Contains(after, "\n-- @"+sec.name+"\n") {
			return algorithmParts{}, fmt.Errorf("luagen: %s.lua has more than one \"-- @%s\" line", name, sec.name)
		}
		if i == 0 {
			p.helpers = trim(before)
		} else {
			p.sections[i-1] = trim(before)
		}
		rest = after
	}
	p.sections[len(sections)-1] = trim(rest)
	return p, nil
}

// trim returns text without its trailing blank lines, ending in one newline.
func trim(text string) string {
	return strings.TrimRight(text, " \n") + "\n"
}

// indent returns text with every line that is not empty indented by prefix.
func indent(text, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.TrimSpace(line) != "" {
			b.WriteString(prefix)
		}
		b.WriteString(line)
	}
	return b.String()
}

// splice replaces the one line of text that is marker, once trimmed of its
// indentation, with insert, indented as the marker was.
func splice(text, marker, insert string) (string, error) {
	for line := range strings.Lines(text) {
		if strings.TrimSpace(line) == marker {
			before, after, _ := strings.Cut(text, line)
			if strings.Contains(after, line) {
				return "", fmt.Errorf("luagen: a driver has more than one %q line", marker)
			}
			prefix := line[:len(line)-len(strings.TrimLeft(line, " "))]
			return before + indent(insert, prefix) + after, nil
		}
	}
	return "", fmt.Errorf("luagen: a driver has no %q line", marker)
}

// generatedBy returns the start of a generated file made of the files
// from, as Lua comments.
func generatedBy(from string) string {
	return comment(`Code generated by "go generate ./lua" from `+from+" in lua/.") +
		"-- DO NOT EDIT: edit those files and run go generate ./lua again.\n--\n"
}

// comment returns text as Lua comment lines of at most 76 characters.
func comment(text string) string {
	var b strings.Builder
	line := "--"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 76 && line != "--" {
			b.WriteString(line + "\n")
			line = "--"
		}
		line += " " + w
	}
	return b.String() + line + "\n"
}

// whyBreak is the part of a generated file's header that says why its
// sections leave early with break.
const whyBreak = `-- Each algorithm section below runs inside repeat ... until true, where
-- break leaves the section early. Redis runs Lua 5.1, which has no goto;
-- the same section text runs inline in the single-rule scripts, where a
-- return would end the whole script, and as a function body in the
-- several-rule ones, so it is written once, in the form both can run.
`

// single returns the single-rule script of the algorithm alg, with its
// settings left as placeholders for lua.Single.
func (s sources) single(alg string) (string, error) {
	p, err := s.parts(alg)
	if err != nil {
		return "", err
	}
	if !slices.Contains(lua.Algorithms(), alg) {
		return "", fmt.Errorf("luagen: %s is not an algorithm of its own", alg)
	}
	if err := checkPacked(); err != nil {
		return "", err
	}
	head := generatedBy("single.lua, prologue.lua, rule.lua and "+alg+".lua") +
		"-- The single-rule script of the " + alg + " algorithm. lua.Single writes a\n" +
		"-- rule's settings into the first line of code, in place of its\n" +
		"-- placeholders, and Redis runs the result.\n--\n" + whyBreak + "\n"
	settings := fmt.Sprintf("-- The rule's settings, which lua.Single writes in, and whether one is out\n"+
		"-- of range (lua.Single tests them in Go, once).\nlocal window, limit, param, settings_bad = %s, %s, %s, %s\nlocal alg_name = '%s'\n",
		"@WINDOW@", "@LIMIT@", "@PARAM@", "@SETTINGS_BAD@", alg)
	steps := []struct{ marker, insert string }{
		{"-- @settings", settings},
		{"-- @layout", layout(singleLayout)},
		{"-- prologue.lua", s["prologue"] + "local peek = false -- a decision, never a Peek\n\n" + p.helpers},
		{"-- rule.lua", s["rule"]},
	}
	for i, sec := range sections {
		steps = append(steps, struct{ marker, insert string }{"-- @" + sec.name, "-- " + alg + ".lua's " + sec.name + " section:\n" + p.sections[i]})
	}
	text := s["single"]
	for _, st := range steps {
		if text, err = splice(text, st.marker, st.insert); err != nil {
			return "", err
		}
	}
	return head + text, nil
}

// several returns the several-rule script, recording nothing when peek is
// true, of the algorithms named names, numbered in that order.
func (s sources) several(peek bool, names []string) (string, error) {
	if len(names) == 0 {
		return "", fmt.Errorf("luagen: a several-rule script needs at least one algorithm")
	}
	var lib, table, numbers strings.Builder
	fmt.Fprintf(&lib, "%slocal peek = %t -- true in peek.lua, which records nothing\n%s", s["prologue"], peek, s["rule"])
	files := make([]string, 0, len(names))
	for i, name := range names {
		if !slices.Contains(names[:i], name) {
			f, err := s.functions(name)
			if err != nil {
				return "", err
			}
			lib.WriteString(f)
			files = append(files, name+".lua")
		}
		fmt.Fprintf(&table, "  [%[1]d] = {%[2]s_validate, %[2]s_check, %[2]s_commit, %[2]s_report},\n", i, name)
		if i > 0 {
			numbers.WriteString(", ")
		}
		fmt.Fprintf(&numbers, "%d (%s)", i, name)
	}
	fmt.Fprintf(&lib, "\n-- Each algorithm number of ARGV, and its functions.\nlocal algorithms = {\n%s}\nlocal algorithm_numbers = '%s'\n",
		table.String(), numbers.String())
	what := "The several-rule script: lua.Several returns it."
	if peek {
		what = "The several-rule script that records nothing (peek is true): lua.Peek\n-- returns it."
	}
	head := generatedBy("several.lua, prologue.lua, rule.lua and "+strings.Join(files, ", ")) +
		"-- " + what + "\n--\n" + whyBreak + "\n"
	text, err := splice(s["several"], "-- @layout", layout(severalLayout))
	if err == nil {
		text, err = splice(text, "-- prologue.lua", lib.String())
	}
	if err != nil {
		return "", err
	}
	return head + text, nil
}

// functions returns the sections of the algorithm named name wrapped as
// functions, <name>_<section>, after its helpers.
func (s sources) functions(name string) (string, error) {
	p, err := s.parts(name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("\n" + p.helpers)
	for i, sec := range sections {
		fmt.Fprintf(&b, "\n-- %s.lua's %s section.\nlocal function %s_%s(%s)\n", name, sec.name, name, sec.name, sec.reads)
		if !strings.Contains(sec.reads, sec.assigns) {
			fmt.Fprintf(&b, "  local %s\n", sec.assigns)
		}
		fmt.Fprintf(&b, "  repeat\n%s  until true\n  return %s\nend\n", indent(p.sections[i], "    "), sec.assigns)
	}
	return b.String(), nil
}
