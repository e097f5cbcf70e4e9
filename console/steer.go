package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// keyAudit is the list of the last maxAudit changes, newest first.
const (
	keyAudit = "{ginlimit:console}:audit"
	maxAudit = 1000
)

// steer makes the changes an operator asks for (an override, a reset, a
// ban lifted), audits each in Redis and in the log, and answers the form
// with the rule's page, or the API call with JSON.
type steer struct {
	views *views
	pages *pages
	rdb   redis.UniversalClient
	log   *slog.Logger
}

// auditEntry is one change made through the console.
type auditEntry struct {
	Who    string    `json:"who"`
	What   string    `json:"what"` // "override", "reset", "lift"
	Route  string    `json:"route"`
	Rule   string    `json:"rule"`
	Target string    `json:"target,omitempty"` // the identity or plan, as the rule's keys name it
	Before string    `json:"before"`
	After  string    `json:"after"`
	When   time.Time `json:"when"`
}

var errBadNumber = errors.New("limit and window_seconds must be whole numbers: limit from 0 (clear the override), window_seconds from 0 (keep the rule's)")

// overrideInput reads the override form: limit, window_seconds, and an
// optional user (an identity, as the lookup takes it) or plan.
func overrideInput(ctx *gin.Context, ri ginlimit.RuleInfo) (ginlimit.Target, int, time.Duration, error) {
	t := ginlimit.Target{Route: ri.Route, Rule: ri.Rule}
	limitText, ok1 := input(ctx, "limit")
	windowText, ok2 := input(ctx, "window_seconds")
	user, ok3 := input(ctx, "user")
	plan, ok4 := input(ctx, "plan")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return t, 0, 0, errTooLong
	}
	limit, window, err := parseLimit(limitText, windowText)
	if err != nil {
		return t, 0, 0, err
	}
	if strings.TrimSpace(user) != "" {
		if t, err = parseIdentity(ri, user); err != nil {
			return t, 0, 0, err
		}
	}
	t.Plan = strings.TrimSpace(plan)
	return t, limit, window, nil
}

// parseLimit reads a limit and a window in seconds (empty: 0).
func parseLimit(limitText, windowText string) (int, time.Duration, error) {
	limit, err := strconv.Atoi(strings.TrimSpace(limitText))
	if err != nil || limit < 0 {
		return 0, 0, errBadNumber
	}
	var window time.Duration
	if w := strings.TrimSpace(windowText); w != "" {
		secs, err := strconv.ParseFloat(w, 64)
		if err != nil || secs < 0 || math.IsNaN(secs) || secs > 1e9 {
			return 0, 0, errBadNumber
		}
		window = time.Duration(secs * float64(time.Second))
	}
	return limit, window, nil
}

// override is /api/override: sets or clears an override.
func (s *steer) override(ctx *gin.Context) {
	ri, err := s.views.find(ctx)
	if err != nil {
		s.answer(ctx, ri, err)
		return
	}
	t, limit, window, err := overrideInput(ctx, ri)
	if err != nil {
		s.answer(ctx, ri, err)
		return
	}
	rctx := ctx.Request.Context()
	before, _ := ri.Policy.Peek(rctx, t)
	if err := ri.Policy.SetLimit(rctx, t, limit, window); err != nil {
		s.answer(ctx, ri, err)
		return
	}
	after, _ := ri.Policy.Peek(rctx, t)
	s.audit(rctx, auditEntry{Who: whoOf(ctx), What: "override", Route: ri.Route, Rule: ri.Rule, Target: s.targetText(ri, t),
		Before: settingsText(before), After: settingsText(after)}, nil)
	s.answer(ctx, ri, nil)
}

// settingsText describes d's settings for the audit.
func settingsText(d ginlimit.Decision) string {
	if d.Limit == 0 {
		return "unknown"
	}
	return fmt.Sprintf("limit %d per %s (%s)", d.Limit, d.Window, sourceName(d.Source))
}

// targetText names t's identity or plan as the audit records it: as the
// rule's keys hold the identity, a keyed hash with HashIdentities.
func (s *steer) targetText(ri ginlimit.RuleInfo, t ginlimit.Target) string {
	var parts []string
	if id, err := ri.Identity(t); err == nil && id != "" {
		parts = append(parts, id)
	}
	if t.Plan != "" {
		parts = append(parts, "plan:"+t.Plan)
	}
	return strings.Join(parts, " ")
}

// reset is /api/reset: clears an identity's count.
func (s *steer) reset(ctx *gin.Context) { s.resetOrLift(ctx, "reset", "identity") }

// lift is /api/lift: lifts an identity's ban.
func (s *steer) lift(ctx *gin.Context) { s.resetOrLift(ctx, "lift", "ban") }

// resetOrLift resets the count of the identity in field: a reset, or the
// lift of its ban (Reset lifts a ban and forgets its strikes).
func (s *steer) resetOrLift(ctx *gin.Context, what, field string) {
	ri, err := s.views.find(ctx)
	if err != nil {
		s.answer(ctx, ri, err)
		return
	}
	typed, ok := input(ctx, field)
	if !ok {
		s.answer(ctx, ri, errTooLong)
		return
	}
	t, err := parseIdentity(ri, typed)
	if err != nil && !errors.Is(err, errNoDims) {
		s.answer(ctx, ri, err)
		return
	}
	rctx := ctx.Request.Context()
	before, _ := ri.Policy.Peek(rctx, t)
	if err := ri.Policy.Reset(rctx, t, "console"); err != nil {
		s.answer(ctx, ri, err)
		return
	}
	id := s.targetText(ri, t)
	m := member{ruleKey{ri.Route, ri.Rule}, id}
	s.views.fleet.forgetBan(m)
	s.audit(rctx, auditEntry{Who: whoOf(ctx), What: what, Route: ri.Route, Rule: ri.Rule, Target: id,
		Before: countText(before), After: "count cleared"}, func(p redis.Pipeliner) {
		p.ZRem(rctx, keyBans, m.route+"\n"+m.rule+"\n"+m.id)
	})
	s.answer(ctx, ri, nil)
}

// countText describes a Peek's count for the audit.
func countText(d ginlimit.Decision) string {
	s := fmt.Sprintf("%d of %d left", d.Remaining, d.Limit)
	if d.Banned {
		s += fmt.Sprintf(", banned for %s", d.RetryAfter.Round(time.Second))
	}
	return s
}

// audit records e in Redis (with more, in the same round trip) and in the
// log. The log line names the operator, the action and the rule, never the
// identity, which the audit page alone shows.
func (s *steer) audit(ctx context.Context, e auditEntry, more func(redis.Pipeliner)) {
	e.When = time.Now().UTC()
	b, _ := json.Marshal(e) // a struct of strings and a time: never fails
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, keyAudit, b)
		p.LTrim(ctx, keyAudit, 0, maxAudit-1)
		if more != nil {
			more(p)
		}
		return nil
	})
	attrs := []slog.Attr{slog.String("who", e.Who), slog.String("what", e.What), slog.String("route", e.Route),
		slog.String("rule", e.Rule), slog.String("before", e.Before), slog.String("after", e.After)}
	if err != nil {
		attrs = append(attrs, errAttr(err))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "ginlimit/console: change", attrs...)
}

// errAttr is err as a log attribute.
func errAttr(err error) slog.Attr { return slog.String("error", err.Error()) }

// answer ends an action: JSON for an API call, or, for a console form,
// the rule's page again (303 after a change, so a reload does not repeat
// it; the page with the error otherwise).
func (s *steer) answer(ctx *gin.Context, ri ginlimit.RuleInfo, err error) {
	form := strings.HasPrefix(ctx.ContentType(), "application/x-www-form-urlencoded") && !strings.Contains(ctx.GetHeader("Accept"), "application/json")
	switch {
	case err == nil && form:
		// Back to the rule's page, without the identity, which stays out
		// of URLs.
		ctx.Redirect(http.StatusSeeOther, "../"+ruleLink(ri.Route, ri.Rule))
	case err == nil:
		ctx.JSON(http.StatusOK, gin.H{"ok": true})
	case ri.Policy == nil:
		fail(ctx, http.StatusNotFound, safeError(err))
	case form:
		// The rule's page again, at api/<action>: its links start at
		// the root. A browser's page is its answer, so it is a 200 (a
		// 400 the browser would report as an error); a script's is a 400.
		d := s.views.ruleData(ctx.Request.Context(), ri, "")
		d.Message, d.Token, d.Root = safeError(err), s.pages.gate.token(whoOf(ctx)), "../"
		status := http.StatusBadRequest
		if ctx.GetHeader("Sec-Fetch-Mode") == "navigate" {
			status = http.StatusOK
		}
		s.pages.render(ctx, status, "rule.html", d)
	default:
		fail(ctx, http.StatusBadRequest, safeError(err))
	}
}

// auditEntries reads the audit from Redis, newest first.
func (v *views) auditEntries(ctx context.Context) ([]auditEntry, error) {
	raw, err := v.rdb.LRange(ctx, keyAudit, 0, maxAudit-1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]auditEntry, 0, len(raw))
	for _, s := range raw {
		var e auditEntry
		if json.Unmarshal([]byte(s), &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}
