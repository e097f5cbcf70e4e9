package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// The claim rule's live limits: an admin overrides its limit and window
// while the service runs, for the rule, a plan or one user, with
// [ginlimit.Policy.SetLimit]; every instance applies the change within a
// second (ginlimit.OverridePoll and the poll's bound).

// adminClaimLimitsPath is the admin API's resource of the claim rule's
// settings.
const adminClaimLimitsPath = "/api/admin/limits/claim"

// maxOverrideBody bounds the body of PUT /api/admin/limits/claim.
const maxOverrideBody = 4 << 10

// ClaimOverride is the JSON body of PUT /api/admin/limits/claim.
type ClaimOverride struct {
	// Limit is the claims admitted per window; 0 clears the override.
	Limit int `json:"limit"`
	// WindowSeconds is the window; 0 keeps the rule's ([ClaimWindow]).
	WindowSeconds int64 `json:"window_seconds"`
	// Plan, when set, overrides that plan's limit only (see [PlanVIP]).
	Plan string `json:"plan,omitempty"`
	// User, when set, overrides that user's limit only, whatever the plan.
	User string `json:"user,omitempty"`
}

// ClaimSettings is the JSON answer of GET and PUT
// /api/admin/limits/claim: the claim rule's settings in force, for the
// rule, a plan or a user, and where they come from.
type ClaimSettings struct {
	// Rule is the name of the claim rule.
	Rule string `json:"rule"`
	// Plan and User say whose settings these are (neither: the rule's).
	Plan string `json:"plan,omitempty"`
	User string `json:"user,omitempty"`
	// Limit is the claims admitted per window.
	Limit int `json:"limit"`
	// WindowSeconds is the window, rounded up to whole seconds.
	WindowSeconds int64 `json:"window_seconds"`
	// Source is "config" (the rule's options), or the override that
	// applies: "rule", "plan" or "user".
	Source string `json:"source"`
}

// sources names each ginlimit.Decision.Source in ClaimSettings.
var sources = [...]string{
	ginlimit.SourceConfig:           "config",
	ginlimit.SourceOverride:         "rule",
	ginlimit.SourcePlanOverride:     "plan",
	ginlimit.SourceIdentityOverride: "user",
}

// errOverride is a PUT body parseOverride refuses; its text is the 400's
// message.
type errOverride string

func (e errOverride) Error() string { return string(e) }

// parseOverride reads and checks a PUT body: one JSON object of
// ClaimOverride's fields and no other, a plan or a user but not both, a
// user id of 1 to MaxAdminUserIDLen bytes, and a window that converts to a
// time.Duration. What ginlimit checks (the limit, the window's range, the
// algorithm's bounds, the plan's name) is left to SetLimit, so that it is
// checked once, as start-up does.
func parseOverride(body []byte) (ClaimOverride, error) {
	var o ClaimOverride
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return ClaimOverride{}, errOverride(`The body must be {"limit": n, "window_seconds": w}, with an optional "plan" or "user"`)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ClaimOverride{}, errOverride("The body must hold one JSON object")
	}
	switch {
	case o.Plan != "" && o.User != "":
		return ClaimOverride{}, errOverride(`Give "plan" or "user", not both`)
	case len(o.User) > MaxAdminUserIDLen:
		return ClaimOverride{}, errOverride("The user id must be 1 to " + strconv.Itoa(MaxAdminUserIDLen) + " bytes")
	case o.WindowSeconds < 0 || o.WindowSeconds > math.MaxInt64/int64(time.Second):
		return ClaimOverride{}, errOverride("window_seconds must be 0 (the rule's window) or a number of seconds")
	}
	return o, nil
}

// target is the ginlimit.Target an override of o (or a look at it) names.
func (o ClaimOverride) target() ginlimit.Target {
	if o.User != "" {
		return ginlimit.Target{Route: ClaimRoute, User: o.User}
	}
	return ginlimit.Target{Route: ClaimRoute, Plan: o.Plan}
}

// setClaimLimit answers PUT /api/admin/limits/claim: it sets (or, with a
// limit of 0, clears) the override, and answers 200 with the settings now
// in force on this instance, which every other applies within a second.
// An override the rule cannot take gets 400 with ginlimit's reason.
func (h *handlers) setClaimLimit(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxOverrideBody))
	if err != nil {
		abortWith(c, http.StatusRequestEntityTooLarge, "The body must be at most "+strconv.Itoa(maxOverrideBody)+" bytes")
		return
	}
	o, err := parseOverride(body)
	if err != nil {
		abortWith(c, http.StatusBadRequest, err.Error())
		return
	}
	ctx := c.Request.Context()
	if err := h.claimPolicy.SetLimit(ctx, o.target(), o.Limit, time.Duration(o.WindowSeconds)*time.Second); err != nil {
		h.overrideFailed(c, err)
		return
	}
	// Who changed what, for the audit trail; the user is left out, as
	// ginlimit leaves identities out of its own logs.
	h.logger.LogAttrs(ctx, slog.LevelInfo, "coupon: admin set a claim limit override",
		slog.String("admin", c.GetString(adminKey)), slog.String("plan", o.Plan), slog.Bool("per_user", o.User != ""),
		slog.Int("limit", o.Limit), slog.Int64("window_seconds", o.WindowSeconds))
	h.answerSettings(c, o)
}

// claimSettings answers GET /api/admin/limits/claim[?plan=vip|?user=id]
// with the settings in force and their source.
func (h *handlers) claimSettings(c *gin.Context) {
	o := ClaimOverride{Plan: c.Query("plan"), User: c.Query("user")}
	switch {
	case o.Plan != "" && o.User != "":
		abortWith(c, http.StatusBadRequest, `Give "plan" or "user", not both`)
	case len(o.User) > MaxAdminUserIDLen:
		abortWith(c, http.StatusBadRequest, "The user id must be 1 to "+strconv.Itoa(MaxAdminUserIDLen)+" bytes")
	default:
		h.answerSettings(c, o)
	}
}

// answerSettings answers 200 with the settings in force for o's target.
// A user's are read with Peek, which reads the count too: one Redis call.
func (h *handlers) answerSettings(c *gin.Context, o ClaimOverride) {
	d, err := h.claimPolicy.Peek(c.Request.Context(), o.target())
	if err != nil {
		h.overrideFailed(c, err)
		return
	}
	source := "config"
	if int(d.Source) < len(sources) {
		source = sources[d.Source]
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, ClaimSettings{
		Rule: d.Rule, Plan: o.Plan, User: o.User,
		Limit: d.Limit, WindowSeconds: ceilSeconds(d.Window), Source: source,
	})
}

// overrideFailed answers a refused or failed SetLimit or Peek: 400 with
// ginlimit's reason for an override the rule cannot take (its text holds
// no identity and no Redis error), 400 for a plan the rule does not have,
// and otherwise 503, the error going to the log only.
func (h *handlers) overrideFailed(c *gin.Context, err error) {
	if errors.Is(err, ginlimit.ErrBadLimit) {
		_, reason, _ := strings.Cut(err.Error(), ginlimit.ErrBadLimit.Error()+": ")
		abortWith(c, http.StatusBadRequest, "Invalid override: "+reason)
		return
	}
	if errors.Is(err, ginlimit.ErrBadTarget) {
		abortWith(c, http.StatusBadRequest, msgBadPlan())
		return
	}
	h.storeFailed(c, "override", err)
}
