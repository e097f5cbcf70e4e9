package app

import (
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

// MaxAdminUserIDLen is the longest user id, in bytes, that the admin API
// accepts in its paths: the longest id the claim rule can count, since
// package identity refuses longer ones. It is larger than [MaxUserIDLen],
// the bound of POST /api/login, so that tokens from another issuer sharing
// the secret can be managed too.
const MaxAdminUserIDLen = identity.MaxUserIDLen

// ResetBy is the actor the admin API gives [ginlimit.Policy.Reset]: what
// the log and the ginlimit_resets_total metric show as "by". It names the
// tool, never a person or the user whose count was reset, because it
// becomes a metric label; the log line of each reset names the admin.
const ResetBy = "admin-api"

// Messages of the admin API's refusals.
const (
	msgUnauthenticated = "Authentication required"
	msgForbidden       = `This route needs a token whose "role" claim is "admin"`
	msgStoreDown       = "The rate limit store is unavailable, please try again later"
)

// adminKey is the gin context key under which requireAdmin stores the
// admin's user id.
const adminKey = "coupon.admin"

// ClaimLimitState is the JSON answer of GET /api/admin/limits/claim/users/:user:
// the state of one user's claim count, as a claim request would be told it,
// without counting anything.
type ClaimLimitState struct {
	// UserID is the user whose count this is.
	UserID string `json:"user_id"`
	// Rule is the name of the claim rule.
	Rule string `json:"rule"`
	// Plan is the plan whose count this is, as asked for with ?plan=;
	// absent for the default plan (tokens without a known plan claim).
	// Each plan keeps its own count.
	Plan string `json:"plan,omitempty"`
	// Allowed says whether the user's next claim would be admitted.
	Allowed bool `json:"allowed"`
	// Limit is the limit per window of the plan: ClaimLimit, or the plan's.
	Limit int `json:"limit"`
	// Remaining is how many more claims the window admits now.
	Remaining int `json:"remaining"`
	// ResetSeconds is the time until more quota becomes available
	// (ginlimit.Decision.Reset: for the sliding log, until the oldest claim
	// in the window leaves it, or a whole window when none is counted),
	// rounded up to whole seconds.
	ResetSeconds int64 `json:"reset_seconds"`
	// RetryAfterSeconds is, when Allowed is false, how long until a claim
	// would be admitted, rounded up to whole seconds; 0 otherwise.
	RetryAfterSeconds int64 `json:"retry_after_seconds"`
}

// admin serves the admin API (a user's claim count, the claim limit's
// overrides) and the console's sign-in, to the holders of an admin token
// only. It is immutable once made.
type admin struct {
	users       *identity.JWT    // verifies the admin tokens, as every other token of the demo
	logger      *slog.Logger     // gets the audit line of each change
	claimPolicy *ginlimit.Policy // the claim route's rule, which the API inspects, resets and overrides
}

// requireAdmin lets through only a request whose bearer token is valid,
// verified by the same identity.JWT as every other token of the demo, and
// whose "role" claim is [AdminRole]: without a valid token it answers 401,
// with one that lacks the role 403. It calls no Redis.
func (adm *admin) requireAdmin(c *gin.Context) {
	admin, status := adm.adminOf(c)
	switch status {
	case http.StatusUnauthorized:
		c.Header("WWW-Authenticate", adm.users.Challenge())
		abortWith(c, status, msgUnauthenticated)
		return
	case http.StatusForbidden:
		abortWith(c, status, msgForbidden)
		return
	}
	c.Set(adminKey, admin)
}

// adminOf returns the admin of c's bearer token and 200, or 401 without a
// valid token, or 403 for a token without the role. It calls no Redis.
func (adm *admin) adminOf(c *gin.Context) (string, int) {
	admin, err := adm.users.UserID(c)
	var role string
	if err == nil {
		// A second verification of the same token; it fails only if the
		// token expired in between.
		role, err = adm.users.Claim(c, RoleClaim)
	}
	switch {
	case err != nil:
		return "", http.StatusUnauthorized
	case role != AdminRole:
		return "", http.StatusForbidden
	}
	return admin, http.StatusOK
}

// requireUserParam refuses, with 400, a :user that no claim count can have
// (see checkAdminUser). gin has decoded it from the path already.
func (adm *admin) requireUserParam(c *gin.Context) {
	if err := checkAdminUser(c.Param("user")); err != nil {
		abortWith(c, http.StatusBadRequest, err.Error())
	}
}

// checkAdminUser refuses, with an errOverride (the 400's message), a user
// id that no claim count can have: empty, longer than [MaxAdminUserIDLen]
// bytes, or not UTF-8 (a token's "sub" is a JSON string, always UTF-8;
// and the answer, JSON too, could not name it as it was asked for).
func checkAdminUser(u string) error {
	switch {
	case u == "" || len(u) > MaxAdminUserIDLen:
		return errOverride("The user id must be 1 to " + strconv.Itoa(MaxAdminUserIDLen) + " bytes")
	case !utf8.ValidString(u):
		return errOverride("The user id must be UTF-8")
	}
	return nil
}

// claimTarget names the claim count of the request's :user, in the default
// plan; Reset clears every plan's count with it.
func claimTarget(c *gin.Context) ginlimit.Target {
	return ginlimit.Target{Route: ClaimRoute, User: c.Param("user")}
}

// requirePlanQuery refuses, with 400, a query of the admin GET of one
// user's count that parsePlanQuery refuses. It calls no Redis, and runs
// before the admin limit, as requireUserParam.
func (adm *admin) requirePlanQuery(c *gin.Context) {
	if _, err := parsePlanQuery(c.Request.URL.RawQuery); err != nil {
		abortWith(c, http.StatusBadRequest, err.Error())
	}
}

// parsePlanQuery reads the query of GET
// /api/admin/limits/claim/users/:user: no parameter but "plan", at most
// once, naming a plan of the claim rule; an absent or empty one is the
// default plan (""). Its errors are errOverride, whose text is the 400's
// message.
func parsePlanQuery(rawQuery string) (string, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", errOverride("The query must be ?plan=NAME")
	}
	for name, vs := range q {
		if name != "plan" || len(vs) != 1 {
			return "", errOverride("The query must be ?plan=NAME, at most once")
		}
	}
	return checkPlan(q.Get("plan"))
}

// checkPlan returns plan when it is "" (the default plan) or a plan of
// the claim rule.
func checkPlan(plan string) (string, error) {
	if plan != "" && claimPlans()[plan] == 0 {
		return "", errOverride(msgBadPlan())
	}
	return plan, nil
}

// msgBadPlan is the message of a refused plan.
func msgBadPlan() string {
	return "The plan must be one of: " + strings.Join(slices.Sorted(maps.Keys(claimPlans())), ", ")
}

// peekClaim answers GET /api/admin/limits/claim/users/:user[?plan=vip] with
// the user's claim count in the plan asked for (the default plan without
// ?plan=), read from Redis without counting anything. The admin API cannot
// know which plan the user's tokens carry, so it is told; requirePlanQuery
// has checked the plan.
func (adm *admin) peekClaim(c *gin.Context) {
	t := claimTarget(c)
	t.Plan = c.Query("plan")
	d, err := adm.claimPolicy.Peek(c.Request.Context(), t)
	if err != nil {
		adm.storeFailed(c, "peek", err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, ClaimLimitState{
		UserID:            c.Param("user"),
		Rule:              d.Rule,
		Plan:              t.Plan,
		Allowed:           d.Allowed,
		Limit:             d.Limit,
		Remaining:         d.Remaining,
		ResetSeconds:      ceilSeconds(d.Reset),
		RetryAfterSeconds: ceilSeconds(d.RetryAfter),
	})
}

// resetClaim answers DELETE /api/admin/limits/claim/users/:user: it clears
// the user's claim count in every plan (ginlimit.Policy.Reset does) and
// answers 204 once every instance has dropped what it held in process about
// it (see ginlimit.Policy.Reset), so that the user's next claim, on any
// instance, is admitted.
func (adm *admin) resetClaim(c *gin.Context) {
	ctx := c.Request.Context()
	if err := adm.claimPolicy.Reset(ctx, claimTarget(c), ResetBy); err != nil {
		adm.storeFailed(c, "reset", err)
		return
	}
	// Who reset, for the audit trail; whose count is left out, as
	// ginlimit leaves identities out of its own logs.
	adm.logger.LogAttrs(ctx, slog.LevelInfo, "coupon: admin reset a user's claim count",
		slog.String("admin", c.GetString(adminKey)))
	c.Status(http.StatusNoContent)
}

// storeFailed answers a failed Peek or Reset: 503 with a fixed message when
// Redis failed, whose error goes to the log only, and 400 for a target that
// names no count (requireUserParam should have refused it already).
func (adm *admin) storeFailed(c *gin.Context, op string, err error) {
	if errors.Is(err, ginlimit.ErrBadTarget) {
		abortWith(c, http.StatusBadRequest, "The user id names no claim count")
		return
	}
	adm.logger.LogAttrs(c.Request.Context(), slog.LevelError, "coupon: admin "+op+" of a claim count failed",
		slog.String("error", err.Error()))
	abortWith(c, http.StatusServiceUnavailable, msgStoreDown)
}

// abortWith stops the chain with the demo's JSON error body.
func abortWith(c *gin.Context, code int, msg string) {
	c.AbortWithStatusJSON(code, response{Code: code, Message: msg})
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
