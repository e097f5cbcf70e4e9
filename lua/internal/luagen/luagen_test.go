package luagen

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/lua"
)

// sourcesT reads the hand-written files of package lua.
func sourcesT(t *testing.T) sources {
	t.Helper()
	s, err := read(os.DirFS("../.."))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSingleInline: each single-rule script carries its algorithm's check
// section inline, not as a function, and no other algorithm's; a
// several-rule script defines an algorithm's functions once, however often
// it is numbered.
func TestSingleInline(t *testing.T) {
	t.Parallel()
	s := sourcesT(t)
	for _, name := range lua.Algorithms() {
		src, err := s.single(name)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := s.parts(name)
		if !strings.Contains(src, indent(p.sections[1], "  ")) {
			t.Errorf("single(%q) does not carry its check section", name)
		}
		if strings.Contains(src, "local function "+name+"_check(") {
			t.Errorf("single(%q) makes its check a function; it runs the sections inline", name)
		}
		for _, other := range lua.Numbered() {
			q, _ := s.parts(other)
			if other != name && strings.Contains(src, indent(q.sections[1], "  ")) {
				t.Errorf("single(%q) carries the algorithm %s too", name, other)
			}
		}
	}
	src, err := s.several(false, []string{"fixed_window", "fixed_window"})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(src, "local function fixed_window_check("); n != 1 {
		t.Errorf("several with a repeated name defines its functions %d times, want once", n)
	}
}

// TestUnknownNames: the generator refuses a name that is no algorithm.
func TestUnknownNames(t *testing.T) {
	t.Parallel()
	s := sourcesT(t)
	for what, f := range map[string]func() error{
		"single unknown":   func() error { _, err := s.single("leaky_bucket"); return err },
		"single penalty":   func() error { _, err := s.single("penalty"); return err },
		"single prologue":  func() error { _, err := s.single("prologue"); return err },
		"several none":     func() error { _, err := s.several(false, nil); return err },
		"several unknown":  func() error { _, err := s.several(false, []string{"fixed_window", "Sliding_Log"}); return err },
		"several driver":   func() error { _, err := s.several(false, []string{"single"}); return err },
		"several prologue": func() error { _, err := s.several(true, []string{"prologue"}); return err },
	} {
		if f() == nil {
			t.Errorf("%s: no error", what)
		}
	}
}

// TestMarkersChecked: a driver without one of its marker lines, or with
// two, and an algorithm whose sections are missing or out of order, are
// refused rather than generated wrong.
func TestMarkersChecked(t *testing.T) {
	t.Parallel()
	base := sourcesT(t)
	for what, edit := range map[string]func(s sources){
		"no layout":        func(s sources) { s["several"] = strings.Replace(s["several"], "-- @layout\n", "", 1) },
		"two layouts":      func(s sources) { s["several"] = "-- @layout\n" + s["several"] },
		"no check":         func(s sources) { s["fixed_window"] = strings.Replace(s["fixed_window"], "\n-- @check\n", "\n", 1) },
		"two checks":       func(s sources) { s["fixed_window"] += "\n-- @check\n" },
		"single no commit": func(s sources) { s["single"] = strings.Replace(s["single"], "-- @commit\n", "", 1) },
	} {
		s := sources{}
		for k, v := range base {
			s[k] = v
		}
		edit(s)
		_, errSingle := s.single("fixed_window")
		_, errSeveral := s.several(false, lua.Numbered())
		if errSingle == nil && errSeveral == nil {
			t.Errorf("%s: generated without an error", what)
		}
	}
}

// TestSectionsKeepTheirNames checks what lets a section run both inline
// (Single) and as a function (Several): no section declares a local named
// as one of the names the drivers give the sections (it would hide the
// driver's), and none assigns to one it does not own (inline, the next
// section would see it). A section owns what it assigns (see sections) and
// the algorithm's state, a and b, except validate. It reads the lines that
// start with local or with an assignment, so it is a guard, not a parser.
func TestSectionsKeepTheirNames(t *testing.T) {
	t.Parallel()
	shared := []string{"now", "peek", "pack", "unpack_ints", "a", "b"}
	for _, s := range sections {
		for _, f := range strings.Split(s.reads+", "+s.assigns, ", ") {
			if !slices.Contains(shared, f) {
				shared = append(shared, f)
			}
		}
	}
	// Declarations: local names, local functions and loop variables.
	decl := regexp.MustCompile(`(?m)(?:^\s*local\s+(?:function\s+)?|\bfor\s+)(\w+(?:\s*,\s*\w+)*)\s*(=|\bin\b|\(|$)`)
	// Assignments: at the start of a line or after then, do, else or ;.
	assign := regexp.MustCompile(`(?m)(?:^|\bthen\b|\bdo\b|\belse\b|;)\s*(\w+(?:\s*,\s*\w+)*)\s*=[^=]`)
	s := sourcesT(t)
	for _, name := range lua.Numbered() {
		p, err := s.parts(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range sections {
			owns := strings.Split(s.assigns, ", ")
			if s.name != "validate" {
				owns = append(owns, "a", "b")
			}
			for _, m := range decl.FindAllStringSubmatch(p.sections[i], -1) {
				for _, v := range strings.Split(m[1], ",") {
					if v = strings.TrimSpace(v); slices.Contains(shared, v) {
						t.Errorf("%s.lua's %s section declares a local %s, which hides the driver's", name, s.name, v)
					}
				}
			}
			for _, m := range assign.FindAllStringSubmatch(p.sections[i], -1) {
				if strings.HasPrefix(strings.TrimSpace(m[1]), "local") {
					continue
				}
				for _, v := range strings.Split(m[1], ",") {
					if v = strings.TrimSpace(v); slices.Contains(shared, v) && !slices.Contains(owns, v) {
						t.Errorf("%s.lua's %s section assigns %s, which it does not own", name, s.name, v)
					}
				}
			}
		}
	}
	// The guard can fail: sections that hide the driver's names or assign
	// a setting.
	for _, src := range []string{"  local total, a = 0, s\n", "for ok = 1, 2 do end\n", "local function retry() end\n"} {
		if m := decl.FindStringSubmatch(src); m == nil || !slices.Contains(shared, strings.TrimSpace(strings.Split(m[1], ",")[len(strings.Split(m[1], ","))-1])) {
			t.Errorf("the guard does not see the declaration in %q", src)
		}
	}
	if m := assign.FindStringSubmatch("if b then cost = 1 end\n"); m == nil || strings.TrimSpace(m[1]) != "cost" {
		t.Errorf("the guard does not see the assignment in an if: %v", m)
	}
}
