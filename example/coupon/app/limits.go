package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// The claim rule's live limits: an admin overrides its limit and window
// while the service runs, for the rule, a plan or one user, with
// [ginlimit.Policy.SetLimit]; every instance applies the change when its
// notice arrives (see ginlimit.OverridePoll for one that missed it).

// adminClaimLimitsPath is the admin API's resource of the claim rule's
// settings.
const adminClaimLimitsPath = "/api/admin/limits/claim"

// maxOverrideBody bounds the body of PUT /api/admin/limits/claim.
const maxOverrideBody = 4 << 10

// ClaimOverride is the JSON body of PUT /api/admin/limits/claim (see
// parseOverride for how strictly it is read).
type ClaimOverride struct {
	// Limit is the claims admitted per window; 0 clears the override. It
	// is required: a body without it is refused, never taken for a clear.
	Limit int `json:"limit"`
	// WindowSeconds is the window; 0 or absent keeps the rule's
	// ([ClaimWindow]).
	WindowSeconds int64 `json:"window_seconds"`
	// Plan, when set, overrides that plan's limit only (see [PlanVIP]).
	// When present it must not be empty.
	Plan string `json:"plan,omitempty"`
	// User, when set, overrides that user's limit only, whatever the plan.
	// When present it must not be empty.
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

// msgOverrideBody is the message of a PUT body that is not one JSON object
// of ClaimOverride's fields.
const msgOverrideBody = `The body must be one JSON object {"limit": n}, with an optional "window_seconds" and an optional "plan" or "user"`

// parseOverride reads and checks a PUT body strictly, since a body read
// loosely changes limits nobody meant to change: one JSON object of
// ClaimOverride's fields, named exactly ("LIMIT" is no field), each at
// most once, and no other; "limit" present (a clear is said with
// {"limit": 0}, never by leaving it out), an integer, as "window_seconds"
// is; "plan" and "user" strings that are not empty when present (an
// empty user would name the whole rule), and not both; a user id that
// checkAdminUser takes; and a window that converts to a
// time.Duration. What ginlimit checks (the limit, the window's range, the
// algorithm's bounds, the plan's name) is left to SetLimit, so that it is
// checked once, as start-up does. Its errors are errOverride, whose text
// is the 400's message and never holds the body's text.
func parseOverride(body []byte) (ClaimOverride, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ClaimOverride{}, errOverride(msgOverrideBody)
	}
	var o ClaimOverride
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return ClaimOverride{}, errOverride(msgOverrideBody)
		}
		if seen[name] {
			return ClaimOverride{}, errOverride(msgOverrideBody + "; each field at most once")
		}
		seen[name] = true
		if err := o.setField(dec, name); err != nil {
			return ClaimOverride{}, err
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return ClaimOverride{}, errOverride(msgOverrideBody)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ClaimOverride{}, errOverride("The body must hold one JSON object")
	}
	return o, o.check(seen)
}

// setField reads the value of the field name from dec into o.
func (o *ClaimOverride) setField(dec *json.Decoder, name string) error {
	t, err := dec.Token()
	if err != nil {
		return errOverride(msgOverrideBody)
	}
	switch name {
	case "limit":
		n, ok := jsonInt(t, math.MinInt)
		if !ok {
			return errOverride(`"limit" must be an integer`)
		}
		o.Limit = int(n)
	case "window_seconds":
		n, ok := jsonInt(t, 0)
		if !ok || n > math.MaxInt64/int64(time.Second) {
			return errOverride(`"window_seconds" must be 0 (the rule's window) or a number of seconds`)
		}
		o.WindowSeconds = n
	case "plan", "user":
		v, ok := t.(string)
		if !ok || v == "" {
			return errOverride(`"` + name + `" must be a string that is not empty, when present`)
		}
		if name == "plan" {
			o.Plan = v
		} else {
			o.User = v
		}
	default:
		return errOverride(msgOverrideBody + "; no other field")
	}
	return nil
}

// check checks what a body says as a whole, seen being the fields it
// has.
func (o ClaimOverride) check(seen map[string]bool) error {
	switch {
	case !seen["limit"]:
		return errOverride(`"limit" is required; {"limit": 0} clears the override`)
	case o.Plan != "" && o.User != "":
		return errOverride(`Give "plan" or "user", not both`)
	case o.User != "":
		return checkAdminUser(o.User)
	}
	return nil
}

// jsonInt returns t, a token of a decoder with UseNumber, as an int64 of
// at least least, and whether it is one: a JSON number written as an
// integer ("5", not "5.0" or "5e0") that fits an int.
func jsonInt(t json.Token, least int64) (int64, bool) {
	num, ok := t.(json.Number)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(num), 10, strconv.IntSize)
	return n, err == nil && n >= least
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
func (adm *admin) setClaimLimit(c *gin.Context) {
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
	if err := adm.claimPolicy.SetLimit(ctx, o.target(), o.Limit, time.Duration(o.WindowSeconds)*time.Second); err != nil {
		adm.overrideFailed(c, err)
		return
	}
	// Who changed what, for the audit trail; the user is left out, as
	// ginlimit leaves identities out of its own logs.
	adm.logger.LogAttrs(ctx, slog.LevelInfo, "coupon: admin set a claim limit override",
		slog.String("admin", c.GetString(adminKey)), slog.String("plan", o.Plan), slog.Bool("per_user", o.User != ""),
		slog.Int("limit", o.Limit), slog.Int64("window_seconds", o.WindowSeconds))
	adm.answerSettings(c, o)
}

// settingsKey is the gin context key under which requireSettingsQuery
// stores whose settings GET /api/admin/limits/claim asks for.
const settingsKey = "coupon.settings"

// requireSettingsQuery refuses, with 400, a query of GET
// /api/admin/limits/claim that parseSettingsQuery refuses, and otherwise
// stores what it names for claimSettings. It calls no Redis, and runs
// before the admin limit.
func (adm *admin) requireSettingsQuery(c *gin.Context) {
	o, err := parseSettingsQuery(c.Request.URL.RawQuery)
	if err != nil {
		abortWith(c, http.StatusBadRequest, err.Error())
		return
	}
	c.Set(settingsKey, o)
}

// claimSettings answers GET /api/admin/limits/claim[?plan=vip|?user=id]
// with the settings in force and their source.
func (adm *admin) claimSettings(c *gin.Context) {
	o, _ := c.MustGet(settingsKey).(ClaimOverride) // set by requireSettingsQuery
	adm.answerSettings(c, o)
}

// parseSettingsQuery reads the query of GET /api/admin/limits/claim: no
// parameter but "plan" and "user", each at most once, and not both; an
// empty or absent "plan" is the default plan, any other a plan of the
// claim rule; and a "user" that is present is one checkAdminUser takes:
// an empty one, which an unset shell variable makes, is refused rather
// than read as the rule's settings. Its errors
// are errOverride, whose text is the 400's message.
func parseSettingsQuery(rawQuery string) (ClaimOverride, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return ClaimOverride{}, errOverride("The query must be ?plan=NAME or ?user=ID")
	}
	for name, vs := range q {
		if name != "plan" && name != "user" || len(vs) != 1 {
			return ClaimOverride{}, errOverride("The query must be ?plan=NAME or ?user=ID, each at most once")
		}
	}
	o := ClaimOverride{Plan: q.Get("plan"), User: q.Get("user")}
	_, hasUser := q["user"]
	if hasUser {
		if err := checkAdminUser(o.User); err != nil {
			return ClaimOverride{}, err
		}
		if q.Has("plan") {
			return ClaimOverride{}, errOverride(`Give "plan" or "user", not both`)
		}
	}
	_, err = checkPlan(o.Plan)
	return o, err
}

// answerSettings answers 200 with the settings in force for o's target.
// A user's are read with Peek, which reads the count too: one Redis call.
func (adm *admin) answerSettings(c *gin.Context, o ClaimOverride) {
	d, err := adm.claimPolicy.Peek(c.Request.Context(), o.target())
	if err != nil {
		adm.overrideFailed(c, err)
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
func (adm *admin) overrideFailed(c *gin.Context, err error) {
	if errors.Is(err, ginlimit.ErrBadLimit) {
		_, reason, _ := strings.Cut(err.Error(), ginlimit.ErrBadLimit.Error()+": ")
		abortWith(c, http.StatusBadRequest, "Invalid override: "+reason)
		return
	}
	if errors.Is(err, ginlimit.ErrBadTarget) {
		abortWith(c, http.StatusBadRequest, msgBadPlan())
		return
	}
	adm.storeFailed(c, "override", err)
}
