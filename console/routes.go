package console

import (
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
)

var (
	//go:embed templates/*.html
	templateFS embed.FS
	//go:embed assets/console.css
	stylesheet []byte
	//go:embed assets/favicon.svg
	favicon []byte
)

// pages is every page's template, parsed once.
var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"seconds": func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) },
	"source":  sourceName,
	"chart":   chart,
	"page":    func(title, root string) pageHead { return pageHead{title, root} },
}).ParseFS(templateFS, "templates/*.html"))

// pageHead is what the layout's head needs: the page's title, and the
// way from the page's address to the console's root ("", or "../" for a
// page that answers a form posted to api/), which every link starts with.
type pageHead struct{ Title, Root string }

// routes mounts the console's handlers on r, each behind guard.
func (c *Console) routes(r gin.IRouter) {
	g := r.Group("", c.guard)
	g.GET("/", c.overviewPage)
	g.GET("/rule", c.rulePage)
	g.POST("/rule", c.rulePage) // the lookup: a POST, so the identity stays out of URLs and logs
	g.GET("/audit", c.auditPage)
	g.GET("/console.css", func(ctx *gin.Context) { ctx.Data(http.StatusOK, "text/css; charset=utf-8", stylesheet) })
	g.GET("/favicon.svg", func(ctx *gin.Context) { ctx.Data(http.StatusOK, "image/svg+xml", favicon) })
	g.GET("/api/rules", c.rulesAPI)
	g.GET("/api/rule", c.ruleAPI)
	g.POST("/api/lookup", c.lookupAPI)
	g.GET("/api/audit", c.auditAPI)
	g.POST("/api/override", c.overrideAPI)
	g.POST("/api/reset", c.resetAPI)
	g.POST("/api/lift", c.liftAPI)
}

// sourceName names a Decision.Source.
func sourceName(s ginlimit.Source) string {
	switch s {
	case ginlimit.SourceOverride:
		return "override"
	case ginlimit.SourcePlanOverride:
		return "plan override"
	case ginlimit.SourceIdentityOverride:
		return "identity override"
	}
	return "configuration"
}

// render writes page name with data, or a plain 500 that says nothing of
// the error.
func (c *Console) render(ctx *gin.Context, status int, name string, data any) {
	ctx.Status(status)
	ctx.Header("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(ctx.Writer, name, data); err != nil {
		c.log.LogAttrs(ctx.Request.Context(), slog.LevelError, "ginlimit/console: page failed", errAttr(err))
	}
}

// fail answers a request the console could not serve: the message, which
// the caller made safe to show, as JSON.
func fail(ctx *gin.Context, status int, msg string) {
	ctx.AbortWithStatusJSON(status, gin.H{"error": msg})
}

// input returns the request's field name, from the query or the form,
// cut to maxInput (ok false when it was longer).
func input(ctx *gin.Context, name string) (string, bool) {
	v, found := ctx.GetPostForm(name)
	if !found {
		v = ctx.Query(name)
	}
	if len(v) > maxInput {
		return "", false
	}
	return v, true
}
