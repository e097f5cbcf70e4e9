package console

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// api answers the console's JSON reads: what the pages show, for a
// script. The changes (override, reset, lift) are steer's.
type api struct{ views *views }

// rules is /api/rules: the overview.
func (a *api) rules(ctx *gin.Context) {
	ov := a.views.overviewOf(ctx.Request.Context())
	ctx.JSON(http.StatusOK, ov)
}

// rule is /api/rule: a rule's page.
func (a *api) rule(ctx *gin.Context) {
	ri, err := a.views.find(ctx)
	if err != nil {
		fail(ctx, http.StatusNotFound, err.Error())
		return
	}
	ctx.JSON(http.StatusOK, a.views.ruleData(ctx.Request.Context(), ri, ""))
}

// lookup is /api/lookup: an identity's count, posted so that it stays
// out of URLs.
func (a *api) lookup(ctx *gin.Context) {
	ri, err := a.views.find(ctx)
	if err != nil {
		fail(ctx, http.StatusNotFound, err.Error())
		return
	}
	typed, ok := ctx.GetPostForm("identity")
	if !ok || len(typed) > maxInput {
		fail(ctx, http.StatusBadRequest, errTooLong.Error())
		return
	}
	res := a.views.lookup(ctx.Request.Context(), ri, typed)
	if res.Error != "" {
		fail(ctx, http.StatusBadRequest, res.Error)
		return
	}
	ctx.JSON(http.StatusOK, res)
}

// audit is /api/audit: the last changes, newest first.
func (a *api) audit(ctx *gin.Context) {
	entries, err := a.views.auditEntries(ctx.Request.Context())
	if err != nil {
		fail(ctx, http.StatusServiceUnavailable, "Redis could not answer; try again")
		return
	}
	ctx.JSON(http.StatusOK, entries)
}
