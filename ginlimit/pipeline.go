package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/lua"
)

// The decision pipeline, the one path every decision takes, for one rule or
// several, from gin (serve) or not (Allow):
//
//	identity → key → cost → deny cache → backend call → parse → fallback
//
// and then, for a request, the answer (response.go) and the observers
// (observe.go). The pipeline decides policy and knows nothing about
// connections; the engine (internal/engine) knows Redis and nothing about
// policy.

// call is one rule's share of a decision.
type call struct {
	rule   *rule
	key    string
	cost   int
	ticket state.Ticket // the call's place in its rule's deny cache (see enter)
}

// request is the memory of one decision, in one allocation for one rule:
// the decision the handler reads, the calls, the key slice go-redis takes,
// and the header values.
type request struct {
	d      Decision
	scope  scope
	calls  []call
	keys   []string
	one    [1]call
	oneKey [1]string
	vals   [6]string
	// buf holds, while prepare builds the keys, an IP address's text; then
	// the header values, which writeHeaders hands to the response as
	// strings over buf: nothing may write buf after writeHeaders.
	buf [80]byte
}

// newRequest returns the memory of a decision on every rule of p: one call
// per rule, and one more before each rule with a [Ban], for its penalty.
func (p *Policy) newRequest(s scope) *request {
	req := &request{scope: s}
	if p.calls == 1 {
		req.calls, req.keys = req.one[:], req.oneKey[:]
	} else {
		req.calls, req.keys = make([]call, p.calls), make([]string, p.calls)
	}
	return req
}

// addBan puts the penalty of the rule whose call is req.calls[j+1] at
// req.calls[j], on the same identity, and returns j+1; for a rule without a
// Ban it returns j.
func (p *Policy) addBan(req *request, j int, r *rule, w *who) int {
	if r.ban == nil {
		return j
	}
	pc := &req.calls[j]
	pc.rule, pc.cost = r.ban, 1
	pc.key = buildKey(r.ban, p.named, req.scope, w)
	req.keys[j] = pc.key
	return j + 1
}

// serve is the gin handler of a compiled policy. The rate rules are
// decided first; a request they admit then takes its slots of the
// in-flight rules (inflight.go), holds them while the rest of the chain
// runs, and gives them back when it returns.
func (p *Policy) serve(c *gin.Context) {
	req := p.newRequest(requestScope(c))
	if !p.prepare(c, req, p.rules) {
		return
	}
	var slots *request
	if len(p.slots) > 0 {
		slots = p.newSlotRequest(req.scope)
		if !p.prepare(c, slots, p.slots) {
			return
		}
	}
	ctx := c.Request.Context()
	var start time.Time
	if len(p.observers) > 0 {
		start = time.Now()
	}
	final := req
	if len(p.rules) > 0 {
		var err error
		req.d, err = p.decide(ctx, req)
		c.Set(decisionKey{}, &req.d)
		p.answer(c, req, err)
	}
	var held *holding
	if slots != nil && !c.IsAborted() {
		var err error
		held, err = p.takeSlots(ctx, slots)
		if held != nil {
			// Released however serve ends: a panic in a hook or an
			// observer below would otherwise leave the slot renewed for
			// ever.
			defer held.release()
		}
		if err == nil && !slots.d.Allowed && len(req.calls) > len(p.rules) {
			// An in-flight refusal is a strike for every Ban of the route,
			// reported now, so that a ban it makes holds on the very next
			// request, on any instance.
			p.reportStrikes(ctx, req, 1)
		}
		// An admission by every in-flight rule leaves the rate rules'
		// decision and headers as they are; anything else is the answer.
		if len(p.rules) == 0 || !slots.d.Allowed || err != nil {
			final = slots
			c.Set(decisionKey{}, &slots.d)
			p.answer(c, slots, err)
		}
	}
	if len(p.observers) > 0 {
		p.observe(ctx, req.scope.label(), &final.d, time.Since(start))
	}
	if held != nil {
		c.Next() // the rest of the chain runs while the slots are held
	}
}

// prepare finds each rule's identity, key and cost for req, or answers the
// request (401, 400 or 500) and returns false.
//
// The identity lives on prepare's stack, its IP text in req.buf (free until
// the headers are written): only the keys leave it. (A debug line about a
// refusal finds the identity again: see debug.)
func (p *Policy) prepare(c *gin.Context, req *request, rules []*rule) bool {
	w := who{text: req.buf[:0]}
	i := 0
	for _, r := range rules {
		if r.plans != nil {
			r = r.planFor(c)
		}
		j := i // the rule's call, after its ban's
		if r.ban != nil {
			j++
		}
		cl := &req.calls[j]
		if err := r.identify(c, &w); err != nil {
			p.identityFailed(c, r, err)
			return false
		}
		i = p.addBan(req, i, r, &w)
		cl.rule = r
		cl.key = buildKey(r, p.named, req.scope, &w)
		req.keys[i] = cl.key
		cl.cost = r.cost
		if r.costFunc != nil {
			cl.cost = r.costFunc(c)
		}
		i++
	}
	return true
}

// Allow decides one request for key, an identity of the caller's choosing
// (a user id, "ip:192.0.2.1", a tenant), costing n units on every rule (1
// for a plain request; a cost below 1 is charged as 1). The Redis key of
// each rule is its prefix followed by key, escaped, inside a Redis Cluster
// hash tag (and, for a route with Rules, the rule's name). A request that
// costs more than a rule can ever admit is refused without a Redis call,
// with [Decision.Reason] saying why.
//
// Allow makes one Redis round trip, bounded by ctx and the policy's timeout.
// When Redis fails it returns the error, wrapped, together with the decision
// the policy's FailPolicy takes.
func (p *Policy) Allow(ctx context.Context, key string, n int) (Decision, error) {
	if len(p.slots) > 0 {
		return Decision{}, errAllowInFlight
	}
	var start time.Time
	if len(p.observers) > 0 {
		start = time.Now()
	}
	req := p.newRequest(scope{route: key})
	i := 0
	for _, r := range p.rules {
		i = p.addBan(req, i, r, nil)
		cl := &req.calls[i]
		cl.rule, cl.cost = r, n
		cl.key = buildKey(r, p.named, req.scope, nil)
		req.keys[i] = cl.key
		i++
	}
	d, err := p.decide(ctx, req)
	if len(p.observers) > 0 {
		p.observe(ctx, "", &d, time.Since(start)) // Event.Route is "" outside gin
	}
	return d, err
}

// decide takes the decision on the calls of req: a cost no rule can admit
// is refused at once; a rejection the deny cache is certain of is answered
// from it; otherwise one script call decides every rule. When Redis cannot
// decide, the failure policy does; when this process could not get the call
// to Redis in time (ErrSaturated), the saturation answer does (see failed).
func (p *Policy) decide(ctx context.Context, req *request) (Decision, error) {
	for i := range req.calls {
		cl := &req.calls[i]
		cl.cost = max(cl.cost, 1)
		if cl.cost > cl.rule.maxCost {
			return cl.rule.tooCostly(cl.cost, p.named), nil
		}
	}
	var wctx context.Context // the bound on waiting in the deny cache, made when needed
	for {
		turn, i := p.enter(req)
		if turn.Verdict == state.Reject {
			p.strikeAll(req, i)
			return req.calls[i].rule.cached(turn.Answer()), nil // the cheap path
		}
		if turn.Verdict == state.Send {
			break
		}
		// Waiting for calls in flight on the key is time in this process,
		// bounded by QueueTimeout; those calls are bounded by the Timeout
		// once they are on the wire.
		if wctx == nil {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeoutCause(ctx, p.queue, engine.ErrQueueTimedOut)
			defer cancel()
		}
		if err := turn.Await(wctx); err != nil {
			if ctx.Err() != nil {
				return p.gone(req, fmt.Errorf("%w: %w", ErrClientGone, context.Cause(ctx)))
			}
			return p.failed(req, fmt.Errorf("%w: %w", ErrSaturated, err))
		}
	}
	return p.ask(ctx, req)
}

// ask decides req with one script call, and with the failure policy, or
// as a client that has gone, when Redis does not answer.
func (p *Policy) ask(ctx context.Context, req *request) (Decision, error) {
	p.bringStrikes(req)
	script, args := p.call(req)
	var sent time.Time
	if p.onFail == FailLocal {
		sent = time.Now()
	}
	reply, brk, err := p.engine.Run(ctx, p.queue, p.timeout, script, req.keys, args)
	var d Decision
	var each []Decision
	if err == nil {
		if d, each, err = p.parse(req, reply); err == nil && p.onFail == FailLocal {
			p.learn(req, &d, each, sent)
		}
	}
	p.leave(req, &d, each, err == nil)
	if err != nil {
		p.restoreStrikes(req)
		if ctx.Err() != nil {
			// However the call ended, the request's context ended first:
			// no fallback decides for a client that has gone.
			if !errors.Is(err, ErrClientGone) {
				err = fmt.Errorf("%w: %w", ErrClientGone, err)
			}
			d, err = p.gone(req, err)
		} else {
			d, err = p.failed(req, err)
		}
	}
	d.brk = brk
	return d, err
}

// strikeAll records a refusal of req answered in process, by its call i,
// as a strike for every Ban of the route, as in Redis (lua/penalty.lua):
// each is told with the next call on its rule's key. A ban's own refusal
// is no strike for that ban (its report counts nothing while it holds).
func (p *Policy) strikeAll(req *request, i int) {
	for j := range req.calls {
		if o := &req.calls[j]; o.rule.ban != nil && !(j == i+1 && req.calls[i].rule.penalty) {
			p.strike(req, j)
		}
	}
}

// bringStrikes puts on each penalty call of req the refusals its rule's
// deny cache answered since the key's last call: they are strikes too.
func (p *Policy) bringStrikes(req *request) {
	for i := range req.calls {
		if cl := &req.calls[i]; cl.rule.penalty {
			owner := &req.calls[i+1]
			cl.cost = int(min(1+owner.rule.deny.Drain(owner.key), lua.MaxCost))
		}
	}
}

// restoreStrikes gives back the strikes that req's penalty calls carried
// (see decide) to the deny caches they were drained from, after a call
// that Redis did not answer: they are reported with the key's next call.
// A call that timed out may have run all the same, so a strike can be
// counted twice; it is never lost.
func (p *Policy) restoreStrikes(req *request) {
	for i := range req.calls {
		if cl := &req.calls[i]; cl.rule.penalty && cl.cost > 1 {
			p.carry(*cl, req.calls[i+1], int64(cl.cost-1))
			cl.cost = 1
		}
	}
}

// gone is the decision, and the error, of a request whose own context
// ended before Redis answered (ErrClientGone): refused, and decided by
// nobody. The error names the route and the rules, never the identity.
func (p *Policy) gone(req *request, err error) (Decision, error) {
	first := req.calls[0].rule
	if first.penalty {
		first = req.calls[1].rule
	}
	err = fmt.Errorf("ginlimit: %s: %w", p.describe(req), err)
	return Decision{Rule: first.name, Limit: first.limit, Err: err, decider: first}, err
}

// enter asks each rule's deny cache whether its call may go to Redis. On a
// certain rejection or a wait, it releases what it counted and returns the
// index of the call that decided.
func (p *Policy) enter(req *request) (state.Turn, int) {
	for i := range req.calls {
		cl := &req.calls[i]
		deny := cl.rule.deny
		if deny == nil {
			continue
		}
		turn := deny.Enter(cl.key, cl.cost)
		if turn.Verdict != state.Send {
			for j := range req.calls[:i] {
				p.release(&req.calls[j])
			}
			return turn, i
		}
		cl.ticket = turn.Ticket
	}
	return state.Turn{Verdict: state.Send}, 0
}

// release lets go of a call the deny cache counted and that was not sent.
func (p *Policy) release(cl *call) {
	if cl.rule.deny != nil {
		cl.rule.deny.Release(cl.key, cl.ticket)
		cl.ticket = state.Ticket{}
	}
}

// leave tells each rule's deny cache what the call proved: d, or each
// call's own decision when there are several (ok is false when Redis could
// not decide, which proves nothing).
func (p *Policy) leave(req *request, d *Decision, each []Decision, ok bool) {
	for i := range req.calls {
		cl := &req.calls[i]
		switch {
		case cl.rule.deny == nil:
			continue
		case !ok:
			cl.rule.deny.Release(cl.key, cl.ticket)
		case each != nil:
			cl.rule.deny.Leave(cl.key, cl.ticket, each[i].answer())
		default:
			cl.rule.deny.Leave(cl.key, cl.ticket, d.answer())
		}
		cl.ticket = state.Ticket{}
	}
}

// call returns the script that decides req and its arguments: for one
// call, its rule's single-rule script, which has the rule's settings
// written in, with the test clock ("" for Redis TIME) and the cost; for
// several, the several-rule script (see package lua).
func (p *Policy) call(req *request) (*redis.Script, []any) {
	if len(req.calls) != 1 {
		return severalScript, p.severalArgs(req)
	}
	cl := req.calls[0]
	if p.clock == nil && cl.cost == cl.rule.cost {
		return cl.rule.script, cl.rule.args
	}
	clock := any("")
	if p.clock != nil {
		clock = p.clock()
	}
	return cl.rule.script, singleArgs(clock, cl.cost)
}

// severalArgs returns the several-rule script's arguments for req: the
// test clock ("" for Redis TIME), then each call's rule's settings and
// its cost (see package lua).
func (p *Policy) severalArgs(req *request) []any {
	args := make([]any, lua.ArgRules, lua.ArgRules+lua.ArgsPerRule*len(req.calls))
	args[lua.ArgClock] = ""
	if p.clock != nil {
		args[lua.ArgClock] = p.clock()
	}
	for _, cl := range req.calls {
		at := len(args)
		args = append(args, cl.rule.settings...)
		args[at+lua.ArgCost] = cl.cost
	}
	return args
}

// parse checks and converts the script's reply {now_us, fired, then per
// call: ok, remaining, reset_us, retry_us} into the decision, and, when
// there are several calls, each call's own decision (for the deny caches).
// The decision is the firing call's (with the longest retry among the calls
// that rejected) or, when admitted, the rule with the least remaining. A
// penalty (a rule's Ban) is folded into its rule: a banned identity's
// decision is the penalty's, with Banned set. For a route declared with
// Rules, Rules holds every rule's decision.
func (p *Policy) parse(req *request, reply []int64) (Decision, []Decision, error) {
	return p.parseFor(req, reply, p.named)
}

// parseFor is parse, with Rules filled when every is true.
func (p *Policy) parseFor(req *request, reply []int64, every bool) (Decision, []Decision, error) {
	n := len(req.calls)
	now, fired, err := replyHead(reply, n, lua.ReplyPerRule)
	if err != nil {
		return Decision{}, nil, err
	}
	if n == 1 && !every {
		return callDecision(req.calls[0].rule, reply, 0, fired, now), nil, nil
	}
	each := make([]Decision, n)
	rules := make([]Decision, 0, len(p.rules))
	var retry time.Duration
	best, firedRule := -1, -1
	for i := range each {
		each[i] = callDecision(req.calls[i].rule, reply, i, fired, now)
		retry = max(retry, each[i].RetryAfter)
		if req.calls[i].rule.penalty {
			continue // folded into the next call, its rule
		}
		d := each[i]
		if i > 0 && each[i-1].Banned {
			d = each[i-1]
		}
		if fired == i+1 || i > 0 && fired == i && req.calls[i-1].rule.penalty {
			firedRule = len(rules)
		}
		if best < 0 || d.Remaining < rules[best].Remaining {
			best = len(rules)
		}
		rules = append(rules, d)
	}
	if firedRule >= 0 {
		best = firedRule
	}
	d := rules[best]
	d.RetryAfter = retry
	if every {
		d.Rules = rules
	}
	return d, each, nil
}

// callDecision is the decision of call i, of rule r, alone, from the
// script's reply (see parseFor), fired and now being the reply's header.
func callDecision(r *rule, reply []int64, i, fired int, now time.Time) Decision {
	d := Decision{
		Rule:    r.name,
		Allowed: fired == 0,
		Limit:   r.limit,
		// A key can hold more than the limit (a limit lowered on
		// redeploy, two rules sharing a key): remaining is never
		// reported below 0.
		Remaining: int(max(reply[lua.At(i, lua.ReplyRemaining)], 0)),
		Reset:     time.Duration(reply[lua.At(i, lua.ReplyReset)]) * time.Microsecond,
		Time:      now,
		decider:   r,
	}
	// A penalty reports 0 remaining for a banned identity, from the
	// request that made the ban on (lua/penalty.lua); that request
	// reads as banned when it was refused anyway.
	if reply[lua.At(i, lua.ReplyOK)] == 0 || r.penalty && d.Remaining == 0 && fired != 0 {
		d.RetryAfter = time.Duration(reply[lua.At(i, lua.ReplyRetry)]) * time.Microsecond
		d.Banned = r.penalty
	}
	return d
}

// replyHead checks that a decision script's reply (the decision scripts',
// see package lua, and the in-flight acquire's, see inflight.lua) is its
// header and per integers for each of n calls, and returns the header: the
// Redis time, and the 1-based index of the call that fired (0: none).
func replyHead(reply []int64, n, per int) (time.Time, int, error) {
	if len(reply) != lua.ReplyHead+per*n {
		return time.Time{}, 0, fmt.Errorf("unexpected reply of %d elements", len(reply))
	}
	if fired := reply[lua.ReplyFired]; fired < 0 || fired > int64(n) {
		return time.Time{}, 0, fmt.Errorf("unexpected firing rule %d", fired)
	}
	return time.UnixMicro(reply[lua.ReplyNow]), int(reply[lua.ReplyFired]), nil
}

// cached is the decision for a rejection the deny cache is certain of, a,
// the answer Redis would give.
func (r *rule) cached(a state.Answer) Decision {
	return Decision{
		Rule:       r.name,
		Limit:      r.limit,
		Remaining:  a.Remaining,
		Reset:      a.Reset,
		RetryAfter: a.Reset,
		Time:       a.At,
		Cached:     true,
		Banned:     r.penalty,
		decider:    r,
	}
}

// answer is what the deny cache and the fallback keep of d, Redis's
// answer to a call.
func (d *Decision) answer() state.Answer {
	return state.Answer{Remaining: d.Remaining, Reset: d.Reset, At: d.Time}
}

// tooCostly is the decision for a request that costs more than r can ever
// admit.
func (r *rule) tooCostly(cost int, named bool) Decision {
	what := "the rule"
	if named {
		what = "rule " + r.name
	}
	return Decision{
		Rule: r.name, Limit: r.limit, decider: r,
		Reason: "the request costs " + strconv.Itoa(cost) + ", more than " + what + " can ever admit (" + strconv.Itoa(r.maxCost) + ")",
	}
}
