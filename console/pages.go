package console

import (
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

//go:embed templates/*.html
var templateFS embed.FS

// templates is every page's template, parsed once.
var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"seconds": func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) },
	"source":  sourceName,
	"chart":   chart,
	"page":    func(title, root string) pageHead { return pageHead{title, root} },
}).ParseFS(templateFS, "templates/*.html"))

// pageHead is what the layout's head needs: the page's title, and the
// way from the page's address to the console's root ("", or "../" for a
// page that answers a form posted to api/), which every link starts with.
type pageHead struct{ Title, Root string }

// pages answers the console's HTML pages, rendered on the server from
// templates (html/template escapes by context), each with its form token.
type pages struct {
	views *views
	gate  *gate
	log   *slog.Logger
}

// overview is the overview page: every rule, the instances and breakers.
func (p *pages) overview(ctx *gin.Context) {
	ov := p.views.overviewOf(ctx.Request.Context())
	ov.Token = p.gate.token(whoOf(ctx))
	p.render(ctx, http.StatusOK, "overview.html", ov)
}

// rule is a rule's page; a POST of the lookup form adds an identity's count.
func (p *pages) rule(ctx *gin.Context) {
	ri, err := p.views.find(ctx)
	if err != nil {
		p.render(ctx, http.StatusNotFound, "notfound.html", nil)
		return
	}
	// Only a POST looks up: an identity never comes in a URL.
	lookup, _ := ctx.GetPostForm("identity")
	if len(lookup) > maxInput {
		lookup = ""
	}
	d := p.views.ruleData(ctx.Request.Context(), ri, lookup)
	d.Token = p.gate.token(whoOf(ctx))
	p.render(ctx, http.StatusOK, "rule.html", d)
}

// audit is the audit page: the last changes, newest first.
func (p *pages) audit(ctx *gin.Context) {
	entries, err := p.views.auditEntries(ctx.Request.Context())
	msg := ""
	if err != nil {
		msg = "Redis could not answer; try again"
	}
	p.render(ctx, http.StatusOK, "audit.html", gin.H{"Entries": entries, "Message": msg})
}

// render writes page name with data, or a plain 500 that says nothing of
// the error.
func (p *pages) render(ctx *gin.Context, status int, name string, data any) {
	ctx.Status(status)
	ctx.Header("Content-Type", "text/html; charset=utf-8")
	if err := templates.ExecuteTemplate(ctx.Writer, name, data); err != nil {
		p.log.LogAttrs(ctx.Request.Context(), slog.LevelError, "ginlimit/console: page failed", errAttr(err))
	}
}
