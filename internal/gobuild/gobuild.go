// Package gobuild compiles Go source that a test writes, as a package of
// this module, without writing into the module: the files are laid over a
// directory of the module with go build's -overlay flag. Tests use it to
// check that a program compiles (the README's snippets) or that it does not
// (a route option inside ginlimit.Rule).
package gobuild

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles each program of progs (file contents, one package each)
// as if it were the file main.go of a directory dir/p<i> of the module,
// where dir is relative to the test's working directory, and returns the
// go command's output and error for each. It skips the test in -short mode
// and when the go command is not on PATH. With -gcflags=-e every type error
// of a program is reported, not only the first ten.
func Build(t testing.TB, dir string, progs ...string) (outs [][]byte, errs []error) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	tmp := t.TempDir()
	replace := map[string]string{}
	for i, src := range progs {
		file := filepath.Join(tmp, fmt.Sprintf("p%d.go", i))
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		target, err := filepath.Abs(filepath.Join(dir, fmt.Sprintf("p%d", i), "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Dir(target)); err == nil {
			t.Fatalf("gobuild: %s exists; pick a directory the module does not have", filepath.Dir(target))
		}
		replace[target] = file
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range progs {
		pkg := "./" + filepath.ToSlash(filepath.Join(dir, fmt.Sprintf("p%d", i)))
		out, err := exec.Command(gobin, "build", "-o", os.DevNull, "-overlay", overlayFile, "-gcflags=-e", pkg).CombinedOutput()
		outs, errs = append(outs, out), append(errs, err)
	}
	return outs, errs
}
