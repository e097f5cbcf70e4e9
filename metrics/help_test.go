package metrics_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/internal/promtest"
	"github.com/ginlimit/ginlimit/metrics"
)

// ginlimitOutcomes reads the source of the package that defines ginlimit's
// Outcome (../ginlimit/internal/decide; ginlimit's are aliases) and returns
// the value of every exported Outcome... constant, and the values of those
// that are decisions: the ones its outcomeOf can return. The list is
// the code's own, so a constant added there is checked here without an edit.
func ginlimitOutcomes(t *testing.T) (all map[string]string, decisions []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "ginlimit", "internal", "decide", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	all = map[string]string{} // constant name -> value
	var outcomeOf *ast.FuncDecl
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				collectOutcomes(t, d, all)
			case *ast.FuncDecl:
				if d.Name.Name == "outcomeOf" && d.Recv == nil {
					outcomeOf = d
				}
			}
		}
	}
	if len(all) == 0 || outcomeOf == nil {
		t.Fatalf("found %d Outcome constants and outcomeOf %v in ../ginlimit/internal/decide: has the source moved?", len(all), outcomeOf != nil)
	}
	ast.Inspect(outcomeOf.Body, func(n ast.Node) bool {
		if r, ok := n.(*ast.ReturnStmt); ok && len(r.Results) == 1 {
			if id, ok := r.Results[0].(*ast.Ident); ok {
				v, known := all[id.Name]
				if !known {
					t.Fatalf("outcomeOf returns %s, which is not an Outcome constant", id.Name)
				}
				decisions = append(decisions, v)
			}
		}
		return true
	})
	return all, decisions
}

// collectOutcomes adds the exported Outcome... string constants of d to all.
func collectOutcomes(t *testing.T, d *ast.GenDecl, all map[string]string) {
	t.Helper()
	if d.Tok != token.CONST {
		return
	}
	for _, spec := range d.Specs {
		vs := spec.(*ast.ValueSpec)
		for i, id := range vs.Names {
			if !strings.HasPrefix(id.Name, "Outcome") || !id.IsExported() || i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Fatalf("%s is not a string literal", id.Name)
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			all[id.Name] = v
		}
	}
}

// TestDecisionsHelpNamesEveryOutcome: the HELP text of
// ginlimit_decisions_total lists every outcome that ginlimit gives a
// decision, and the decision label has a series for each. The outcomes are
// read from ginlimit's source, not copied here. The Outcome constants that
// are not decisions (a reset, an unauthorized request) have counters of
// their own and are not in the list.
func TestDecisionsHelpNamesEveryOutcome(t *testing.T) {
	t.Parallel()
	all, decisionOutcomes := ginlimitOutcomes(t)
	c := metrics.New()
	c.Observe(t.Context(), ev("GET /a", "a", allowed))
	s := promtest.Scrape(t, c)
	help := s[decisions].GetHelp()
	list := regexp.MustCompile(`\(([^()]*)\)\.?$`).FindStringSubmatch(help)
	if list == nil {
		t.Fatalf("%s HELP %q does not end with its list of outcomes in parentheses", decisions, help)
	}
	inHelp := strings.Split(list[1], ", ")
	var series []string
	for _, m := range s[decisions].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "decision" {
				series = append(series, l.GetValue())
			}
		}
	}
	for _, o := range decisionOutcomes {
		if !slices.Contains(inHelp, o) {
			t.Errorf("%s HELP %q leaves out the outcome %q", decisions, help, o)
		}
		if !slices.Contains(series, o) {
			t.Errorf("%s has no series for decision=%q (series: %q)", decisions, o, series)
		}
	}
	for _, o := range inHelp {
		if !slices.Contains(decisionOutcomes, o) {
			t.Errorf("%s HELP %q names %q, which is no outcome of a decision (ginlimit's Outcome constants: %v)", decisions, help, o, all)
		}
	}
	if len(inHelp) != len(decisionOutcomes) || len(series) != len(decisionOutcomes) {
		t.Errorf("%d outcomes in the HELP text and %d decision series; ginlimit has %d: %q", len(inHelp), len(series), len(decisionOutcomes), decisionOutcomes)
	}
}
