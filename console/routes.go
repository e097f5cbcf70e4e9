package console

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// The console's two assets, served as they are.
var (
	//go:embed assets/console.css
	stylesheet []byte
	//go:embed assets/favicon.svg
	favicon []byte
)

// mountRoutes mounts the console's handlers on r, each behind the gate.
func mountRoutes(r gin.IRouter, g *gate, p *pages, a *api, s *steer) {
	h := r.Group("", g.guard)
	h.GET("/", p.overview)
	h.GET("/rule", p.rule)
	h.POST("/rule", p.rule) // the lookup: a POST, so the identity stays out of URLs and logs
	h.GET("/audit", p.audit)
	h.GET("/console.css", func(ctx *gin.Context) { ctx.Data(http.StatusOK, "text/css; charset=utf-8", stylesheet) })
	h.GET("/favicon.svg", func(ctx *gin.Context) { ctx.Data(http.StatusOK, "image/svg+xml", favicon) })
	h.GET("/api/rules", a.rules)
	h.GET("/api/rule", a.rule)
	h.POST("/api/lookup", a.lookup)
	h.GET("/api/audit", a.audit)
	h.POST("/api/override", s.override)
	h.POST("/api/reset", s.reset)
	h.POST("/api/lift", s.lift)
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
