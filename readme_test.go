package ginlimit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/internal/gobuild"
)

// TestREADMESnippetsCompile: every Go snippet of the README and of the
// pages in docs/ compiles as written. A snippet that is a whole program is
// built as it is; a fragment is built inside a function that gives it the
// names the README's Usage section defines (r, limiter, and the handlers
// claim and search). The programs are compiled through an overlay, so
// nothing is written into the module, and not linked: a whole program must
// declare its func main, the one error a link would find.
func TestREADMESnippetsCompile(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	snippets := regexp.MustCompile("(?s)```go\n(.*?)```")
	for i, page := range append([]string{"README.md"}, pages...) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		found := snippets.FindAllStringSubmatch(string(text), -1)
		if i == 0 && len(found) < 3 {
			t.Fatalf("found %d Go snippets in the README, want the Usage program and its fragments", len(found))
		}
		blocks = append(blocks, found...)
	}
	progs := make([]string, len(blocks))
	for i, b := range blocks {
		progs[i] = dedent(b[1])
		switch {
		case !strings.HasPrefix(progs[i], "package "):
			progs[i] = fmt.Sprintf(fragmentScaffold, progs[i])
		case strings.HasPrefix(progs[i], "package main\n") && !strings.Contains(progs[i], "\nfunc main() {"):
			t.Errorf("snippet %d (README, then docs/) is a package main without func main:\n%s", i+1, b[1])
		}
	}
	outs, errs := gobuild.Build(t, "zz_readme", progs...)
	for i, err := range errs {
		if err != nil {
			t.Errorf("snippet %d (README, then docs/) does not compile:\n%s\n%s", i+1, blocks[i][1], outs[i])
		}
	}
}

// fragmentScaffold holds a README fragment: the names the Usage section
// defines are parameters, and every import a fragment may use is used.
const fragmentScaffold = `package main

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

var (
	_ = context.Background
	_ = netip.Addr{}
	_ = http.StatusOK
	_ = time.Second
	_ = identity.ErrUnauthenticated
)

func main() {}

func snippet(r *gin.Engine, limiter *ginlimit.Limiter, claim, search gin.HandlerFunc) {
	_, _, _, _ = r, limiter, claim, search
%s
}
`

// dedent removes the indentation a snippet has inside a Markdown list.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}
