package console

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// rulePageData is what a rule's page and /api/rule show.
type rulePageData struct {
	Row     ruleRow
	Traffic []rate
	Refused []refusedRow
	Bans    []banRow
	Lookup  *lookupResult `json:",omitempty"`
	Message string        `json:",omitempty"` // the last action's error, safe to show
	Token   string        `json:"-"`
	Root    string        `json:"-"` // see pageHead
}

// refusedRow is one of the most refused identities.
type refusedRow struct {
	Identity string
	Count    int64
}

// banRow is one ban and its time left.
type banRow struct {
	Identity    string
	LeftSeconds int64
}

// lookupResult is an identity's count, as Peek sees it.
type lookupResult struct {
	Typed     string
	Identity  string // as the rule's keys, and the refused list, hold it
	Remaining int
	Limit     int
	Banned    bool
	RetryIn   float64
	Error     string `json:",omitempty"`
}

var errNoRule = errors.New("no such rule on that route")

// find returns the rule named in the request's route and rule fields.
func (v *views) find(ctx *gin.Context) (ginlimit.RuleInfo, error) {
	route, ok1 := input(ctx, "route")
	rule, ok2 := input(ctx, "rule")
	if !ok1 || !ok2 {
		return ginlimit.RuleInfo{}, errTooLong
	}
	for _, ri := range v.fleet.rules() {
		if ri.Route == route && ri.Rule == rule {
			return ri, nil
		}
	}
	return ginlimit.RuleInfo{}, errNoRule
}

// ruleData gathers a rule's page; lookup, when not empty, is an identity
// the operator typed.
func (v *views) ruleData(ctx context.Context, ri ginlimit.RuleInfo, lookup string) rulePageData {
	now := time.Now()
	k := ruleKey{ri.Route, ri.Rule}
	d := rulePageData{Row: rowOf(ri), Traffic: v.fleet.trafficOf(k, now)}
	for _, it := range v.fleet.refusedOf(k, 20) {
		d.Refused = append(d.Refused, refusedRow{it.id, it.count})
	}
	for _, b := range v.fleet.bansOf(k, now) {
		d.Bans = append(d.Bans, banRow{b.ID, int64(b.Left.Seconds() + 0.999)})
	}
	if lookup != "" {
		d.Lookup = v.lookup(ctx, ri, lookup)
	}
	return d
}

// lookup peeks the count of the identity typed.
func (v *views) lookup(ctx context.Context, ri ginlimit.RuleInfo, typed string) *lookupResult {
	res := &lookupResult{Typed: typed}
	t, err := parseIdentity(ri, typed)
	if err == nil {
		res.Identity, err = ri.Identity(t)
	}
	if err != nil {
		res.Error = safeError(err)
		return res
	}
	d, err := ri.Policy.Peek(ctx, t)
	if err != nil {
		res.Error = safeError(err)
		return res
	}
	res.Remaining, res.Limit, res.Banned, res.RetryIn = d.Remaining, d.Limit, d.Banned, d.RetryAfter.Seconds()
	return res
}

// safeError is the text of err that a response may carry: ginlimit's
// ErrBadLimit and ErrBadTarget texts say what is wrong with the input and
// hold no identity nor Redis error (their docs promise it), and so do the
// console's own; anything else is Redis's, and only named.
func safeError(err error) string {
	switch {
	case errors.Is(err, ginlimit.ErrBadLimit), errors.Is(err, ginlimit.ErrBadTarget):
		return err.Error()
	case errors.Is(err, errTooLong), errors.Is(err, errNoDims), errors.Is(err, errBadIdent),
		errors.Is(err, errNoRule), errors.Is(err, errBadNumber), errors.Is(err, errBadIP):
		return err.Error()
	}
	return "Redis could not answer; try again"
}

// urlValues encodes name, value pairs as a query.
func urlValues(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}
