// Package gobuild compiles Go source that a test writes, as a package of
// this module, without writing into the module: the files are laid over a
// directory of the module with the go command's -overlay flag. Tests use it to
// check that a program compiles (the README's snippets) or that it does not
// (a route option inside ginlimit.Rule).
package gobuild

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// Build compiles each program of progs (file contents, one package each)
// as if it were the file main.go of a directory dir/p<i> of the module,
// where dir is relative to the test's working directory, and returns the
// compiler's output and an error for each program that does not compile.
// All programs go to one `go list -export` run: it type-checks and compiles
// them in parallel and links nothing (a link costs seconds a program and
// finds no error a snippet can make, but for a missing func main). It skips
// the test in -short mode and when the go command is not on PATH. With
// -gcflags=-e every type error of a program is reported, not only the first
// ten.
func Build(t testing.TB, dir string, progs ...string) (outs [][]byte, errs []error) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	overlayFile, pkgs := writeOverlay(t, dir, progs)
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-export", "-json=ImportPath,Error,DepsErrors",
		"-overlay", overlayFile, "-gcflags=-e"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gobuild: go list: %v\n%s", err, stderr.Bytes())
	}
	failures := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p struct {
			ImportPath string
			Error      *struct{ Err string }
			DepsErrors []struct{ Err string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("gobuild: go list's output: %v", err)
		}
		var msg strings.Builder
		if p.Error != nil {
			msg.WriteString(p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			msg.WriteString(e.Err + "\n")
		}
		failures[path.Base(p.ImportPath)] = msg.String()
	}
	for i := range progs {
		msg, listed := failures[fmt.Sprintf("p%d", i)]
		switch {
		case !listed:
			outs, errs = append(outs, stderr.Bytes()), append(errs, fmt.Errorf("gobuild: go list did not list p%d", i))
		case msg != "":
			outs, errs = append(outs, []byte(msg)), append(errs, fmt.Errorf("gobuild: p%d does not compile", i))
		default:
			outs, errs = append(outs, nil), append(errs, nil)
		}
	}
	return outs, errs
}

// writeOverlay writes progs into a temporary directory and the overlay that
// lays them over dir/p<i>/main.go, and returns the overlay's file and the
// packages' patterns.
func writeOverlay(t testing.TB, dir string, progs []string) (overlayFile string, pkgs []string) {
	t.Helper()
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
		pkgs = append(pkgs, "./"+filepath.ToSlash(filepath.Join(dir, fmt.Sprintf("p%d", i))))
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile = filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	return overlayFile, pkgs
}
