package decide

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gin-gonic/gin"
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// The decision pipeline, the one path every decision takes, for one rule or
// several, from gin (serve) or not (Allow):
//
//	identity → key → cost → deny cache → backend call → parse → fallback
//
// and then, for a request, the answer and the observers (serve.go:
// answers). The pipeline decides policy and knows nothing about
// connections; the engine (internal/engine) knows Redis and nothing about
// policy.

// share is one key's part in a script call: a rate rule's, or its Ban's.
// Its record in the call is not kept: see rec.
type share struct {
	key    string
	cost   int
	ticket state.Ticket // its place in its rule's deny cache (see enter)
}

// call is one rate rule's share of a decision, and its Ban's.
type call struct {
	rule *rule.Rate
	share
	// ban is the share of rule's Ban (rule.ban): its strikes and bans; nil
	// for a rule without one. It is held apart so that the calls, and the
	// one call a request holds itself, stay small (see request).
	ban *share
}

// request is the memory of one decision, in one allocation for one rule
// without a Ban: the decision the handler reads, the calls, the key slice
// go-redis takes, and the header values. Its size is watched
// (TestRequestSize): past 512 bytes, Go's allocator gives each request a
// header of its own, which the hot paths measurably pay for. The request of
// the in-flight step has no calls (newSlotRequest).
type request struct {
	p     *Route // the route it is a request of
	d     Decision
	scope rule.Scope
	calls []call
	keys  []string // by record (see rec)
	one   [1]call
	vals  [6]string
	// buf holds, while prepare builds the keys, an IP address's text; then
	// the header values, which writeHeaders hands to the response as
	// strings over buf: nothing may write buf after writeHeaders.
	buf [80]byte
}

// requestScope returns the scope of c's request: its method and route
// template, or the fixed scope of a request that matched no route.
func requestScope(c *gin.Context) rule.Scope {
	route := c.FullPath()
	if route == "" {
		return rule.Scope{Method: rule.UnmatchedMethod, Route: rule.UnmatchedRoute}
	}
	return rule.Scope{Method: c.Request.Method, Route: route}
}

// newRequest returns the memory of a decision on every rate rule of p.
func (p *Route) newRequest(s rule.Scope) *request {
	req := &request{p: p, scope: s}
	req.alloc(p.Rules, p.records)
	return req
}

// alloc makes req's calls for rules, whose calls take records records in
// all (see rec). One rule without a Ban uses req's own memory; otherwise
// the calls and the keys are allocated, and the Bans' shares take the
// places past the calls' end in the calls' allocation, so that a Ban costs
// no allocation of its own.
func (req *request) alloc(rules []*rule.Rate, records int) {
	if records == 1 {
		// The key slice of one record is the call's own key (place writes
		// it there again), so the request holds no second copy of it.
		req.calls, req.keys = req.one[:], unsafe.Slice(&req.one[0].key, 1)
		return
	}
	n := len(rules)
	all := make([]call, records) // n calls, then one share per Ban
	req.calls, req.keys = all[:n:n], make([]string, records)
	bans := all[n:]
	for i, r := range rules {
		if r.Ban != nil {
			req.calls[i].ban, bans = &bans[0].share, bans[1:]
		}
	}
}

// setCall makes req.calls[i] rule r's for identity w (nil for none) at
// cost (putCall).
func (req *request) setCall(i int, r *rule.Rate, w *rule.Who, cost int) {
	key, ban := r.KeyPair(req.p.Named, req.scope, w)
	req.putCall(i, r, key, ban, cost)
}

// putCall makes req.calls[i] rule r's on key at cost, with its Ban's on
// ban when r has one, and places it. An override that applies (liveView,
// below) takes r's place, from the route's in-process view of them: no
// Redis call. A rule of the request's plan has a Ban when the rule it
// stands for has one (see compilePlans), so alloc gave it its share.
func (req *request) putCall(i int, r *rule.Rate, key, ban string, cost int) {
	p := req.p
	cl := &req.calls[i]
	*cl = call{rule: r, ban: cl.ban}
	cl.key, cl.cost = key, cost
	if r.Ban != nil {
		*cl.ban = share{key: ban, cost: 1}
	}
	if v := p.view.Load(); v != nil {
		cl.rule = v.resolve(r, cl.key, p.Named, req.scope)
	}
	req.place(i)
}

// place puts the keys of req.calls[i], and of its Ban, at their records
// (see rec).
func (req *request) place(i int) {
	at := req.rec(i)
	if cl := &req.calls[i]; cl.ban != nil {
		req.keys[at-1] = cl.ban.key
	}
	req.keys[at] = req.calls[i].key
}

// rec is the record of req.calls[i] in req's script call; its Ban's is the
// one before (rec-1). A record is a key, a group of arguments and a group
// of the reply, all at the same index; the several-rule script decides
// them in order and a ban must be decided before its rule
// (lua/several.lua), so each call takes the records after the previous
// call's, its Ban's first. This is the one place that knows the layout:
// the keys (place), the arguments (putRecord) and the reply (callDecision,
// answerAt) go by rec, and records counts them.
func (req *request) rec(i int) int {
	at := i
	for j := range req.calls[:i+1] {
		if req.calls[j].ban != nil {
			at++
		}
	}
	return at
}

// prepare finds each rate rule's identity, key and cost for req, or
// returns the rule whose identity it could not find, and why: the request
// is then answered with 401, 400 or 500 (answers.identityFailed).
//
// The identity lives on prepare's stack, its IP text in req.buf (free until
// the headers are written): only the keys leave it. (A debug line about a
// refusal finds the identity again: see debug.)
func (req *request) prepare(c *gin.Context) (*rule.Base, error) {
	p := req.p
	w := rule.Who{Text: req.buf[:0]}
	for i := range req.calls {
		r := p.Rules[i]
		if r.Plans != nil {
			r = r.PlanFor(c)
		}
		if err := r.Identify(c, &w); err != nil {
			return &r.Base, err
		}
		key, ban := r.KeyPair(p.Named, req.scope, &w)
		req.putCall(i, r, key, ban, r.Cost)
		if r.CostFunc != nil {
			req.calls[i].cost = r.CostFunc(c)
		}
	}
	return nil, nil
}

// inFlight reports whether req is the in-flight step's (newSlotRequest),
// whose rules are the policy's in-flight rules: only that request has no
// calls, as a request of the rate rules always has (alloc).
func (req *request) inFlight() bool { return req.calls == nil }

// newSlotRequest returns the memory of the in-flight step of a request: a
// request without calls (see inFlight), whose keys are those of the
// policy's in-flight rules, in order. Those rules have no plans, so the
// request keeps no rule of its own.
func (p *Route) newSlotRequest(s rule.Scope) *request {
	return &request{p: p, scope: s, keys: make([]string, len(p.Slots))}
}

// prepareSlots finds each in-flight rule's identity and key for req, or
// returns the rule whose identity it could not find, and why, as prepare
// does. As in prepare, the identity's IP text lives in req.buf.
func (req *request) prepareSlots(c *gin.Context) (*rule.Base, error) {
	p := req.p
	w := rule.Who{Text: req.buf[:0]}
	for i, r := range p.Slots {
		key, err := r.Key(c, &w, p.Named, req.scope)
		if err != nil {
			return &r.Base, err
		}
		req.keys[i] = key
	}
	return nil, nil
}

// keyOf returns the key of req's call whose rule (or its Ban) is r; "" when
// none is (an in-flight step's request, which holds no calls).
func (req *request) keyOf(r *rule.Base) string {
	for i := range req.calls {
		c := &req.calls[i]
		if c.rule != nil && (&c.rule.Base == r || c.rule.Ban != nil && &c.rule.Ban.Base == r) {
			return c.key
		}
	}
	return ""
}

// liveView is the overrides that apply to one policy, as its requests read
// them (resolve): the backend's overrides, which every policy of the
// backend shares, and the rules this policy compiled from them. It is
// never replaced but by another view, for a change of the overrides.
//
// A policy compiles an override when a request first meets it, not when
// it is loaded: with many identities' overrides stored, a Policy costs
// nothing for those its requests never meet, so making one more (an admin
// page's, a route's) costs no time and no memory per override, and a
// change costs each policy O(its rules). An override's rule is the
// policy's own, not shared with other policies: it is compiled with the
// policy's route settings (failure policy, staleness, instances) and
// keeps the policy rule's Ban, as the rule it takes the place of does.
type liveView struct {
	p  *Route
	ov *fleet.Overrides

	mu    sync.RWMutex
	rules map[overrideKey]*rule.Rate // compiled, or nil: does not compile
	prev  *liveView                  // the view before, whose rules this one takes while they match
}

// overrideKey is what an override's rule was compiled from: the next view
// keeps a rule whose settings did not change, with what its deny cache and
// fallback learned.
type overrideKey struct {
	from   *rule.Rate
	limit  int
	window time.Duration
	source Source
}

// resolve returns the rule that decides a call of r on key, in scope s:
// the identity's override, or r's, or r itself. Every one counts on key,
// r's (the one of the plan the identity is in), so that a change keeps
// what was spent there: an override changes no key tag (Algorithm.Tag; a
// SlidingCounter's override keeps the sub-window length, rule.OverrideWindow).
func (v *liveView) resolve(r *rule.Rate, key string, named bool, s rule.Scope) *rule.Rate {
	if o := v.find(r, key, named, s); o != nil {
		return o
	}
	return r
}

// find returns the override's rule that takes the place of r, a rule or a
// plan, for the call on key in scope s: the identity's (stored under the
// declared rule's prefix, whatever the plan), or else r's for s; nil for
// none, or one that does not compile.
func (v *liveView) find(r *rule.Rate, key string, named bool, s rule.Scope) *rule.Rate {
	declared := r
	if r.Parent != nil {
		declared = r.Parent
	}
	if set, ok := v.ov.Who[fleet.WhoKey{Prefix: declared.Cfg.Prefix, Rest: key[len(r.Prefix):]}]; ok {
		if o := v.compiled(declared, set, SourceIdentityOverride); o != nil {
			return o
		}
	}
	return v.ruleOverride(r, named, s)
}

// ruleOverride returns the rule of x's own override (a rule's or a
// plan's) for scope s, or nil.
func (v *liveView) ruleOverride(x *rule.Rate, named bool, s rule.Scope) *rule.Rate {
	set, ok := v.ov.Rules[overrideScope(x, named, s)]
	if !ok {
		return nil
	}
	src := SourceOverride
	if x.Parent != nil {
		src = SourcePlanOverride
	}
	return v.compiled(x, set, src)
}

// compiled returns the rule of the override set of from, of source src:
// this view's, the view's before while its settings match, or compiled
// now (once: a concurrent call takes the first one's); nil when it does
// not compile (a value written by hand), so that from keeps its settings.
func (v *liveView) compiled(from *rule.Rate, set fleet.Setting, src Source) *rule.Rate {
	k := overrideKey{from: from, limit: set.Limit, window: set.Window, source: src}
	v.mu.RLock()
	o, ok := v.rules[k]
	prev := v.prev
	v.mu.RUnlock()
	if ok {
		return o
	}
	fresh := false
	if o, ok = prev.rule(k); !ok {
		var err error
		o, err = v.p.CompileOverride(from, set.Limit, set.Window, src)
		fresh = err == nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if had, ok := v.rules[k]; ok {
		return had
	}
	v.rules[k] = o
	if fresh && o != nil {
		v.p.live.compiles.Add(1)
		v.p.Hub.Track(o.Deny, o.Local)
	}
	return o
}

// rule is v's rule compiled from k, and whether v has one (v may be nil).
func (v *liveView) rule(k overrideKey) (*rule.Rate, bool) {
	if v == nil {
		return nil, false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	o, ok := v.rules[k]
	return o, ok
}

// CompileOverride compiles r with limit and window (0: r's) instead of its
// own, as start-up compiles a rule, into the rule an override of source
// src applies. It keeps r's Ban, so that strikes and bans go on.
func (p *Route) CompileOverride(r *rule.Rate, limit int, window time.Duration, src Source) (*rule.Rate, error) {
	rc := r.Cfg
	rc.PlanPick, rc.Plans, rc.Limit = nil, nil, limit
	err := rule.CheckLimit(limit)
	if err == nil && window != 0 {
		err = rule.OverrideWindow(&rc, window)
	}
	var o *rule.Rate
	if err == nil {
		o, err = rule.CompileRate(rc, p.RuleRoute, p.Named, true)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadLimit, err)
	}
	o.Ban, o.Source = r.Ban, uint8(src)
	return o, nil
}

// allowScope is the scope, in a rule's field, of every call of
// Policy.Allow: no gin route or Allow key spells it.
var allowScope = rule.Scope{Method: rule.UnmatchedMethod, Route: "allow"}

// overrideScope is the scope of an override of x, a rule or a plan, that
// holds for calls in scope s on a policy whose keys name their rule
// (named): a Shared rule's group, every key of Policy.Allow, or s.
func overrideScope(x *rule.Rate, named bool, s rule.Scope) fleet.RuleScope {
	switch {
	case s.Method == "":
		s = allowScope
	case x.Shared:
		s, named = rule.Scope{Method: rule.UnmatchedMethod, Route: rule.SharedRoute}, true
	}
	k := fleet.RuleScope{Prefix: x.Cfg.Prefix, Method: s.Method, Route: s.Route}
	if named {
		k.Name = x.EscapedName
	}
	return k
}
