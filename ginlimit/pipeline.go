package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
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

// newRequest returns the memory of a decision on every rate rule of p.
func (p *Policy) newRequest(s rule.Scope) *request {
	req := &request{scope: s}
	req.alloc(p.rules, p.records)
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
// cost, with its Ban's when r has one, and places it. An override that
// applies (overrides.go) takes r's place, from the policy's in-process
// view of them: no Redis call. A rule of the
// request's plan has a Ban when the rule it stands for has one (see
// compilePlans), so alloc gave it its share.
func (p *Policy) setCall(req *request, i int, r *rule.Rate, w *rule.Who, cost int) {
	cl := &req.calls[i]
	*cl = call{rule: r, ban: cl.ban}
	cl.key, cl.cost = rule.BuildKey(&r.Base, p.named, req.scope, w), cost
	if v := p.view.Load(); v != nil {
		cl.rule = v.resolve(r, cl.key, p.named, req.scope)
	}
	if r.Ban != nil {
		*cl.ban = share{key: rule.BuildKey(&r.Ban.Base, p.named, req.scope, w), cost: 1}
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

// serve is the gin handler of a compiled policy. The rate rules are
// decided first; a request they admit then takes its slots of the
// in-flight rules (inflight.go), holds them while the rest of the chain
// runs, and gives them back when it returns.
func (p *Policy) serve(c *gin.Context) {
	p.fleet.Touch()
	p.seen.note(c)
	req := p.newRequest(rule.RequestScope(c))
	if !p.prepare(c, req) {
		return
	}
	var slots *request
	if len(p.slots) > 0 {
		slots = p.newSlotRequest(req.scope)
		if !p.prepareSlots(c, slots) {
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
		if err == nil && !slots.d.Allowed && p.bans {
			// An in-flight refusal is a strike for every Ban of the route,
			// reported now, so that a ban it makes holds on the very next
			// request, on any instance.
			p.reportStrikes(ctx, req.calls, 1)
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
		p.observe(ctx, req.scope.Label(), final, time.Since(start))
	}
	if held != nil {
		c.Next() // the rest of the chain runs while the slots are held
	}
}

// prepare finds each rate rule's identity, key and cost for req, or
// answers the request (401, 400 or 500) and returns false.
//
// The identity lives on prepare's stack, its IP text in req.buf (free until
// the headers are written): only the keys leave it. (A debug line about a
// refusal finds the identity again: see debug.)
func (p *Policy) prepare(c *gin.Context, req *request) bool {
	w := rule.Who{Text: req.buf[:0]}
	for i := range req.calls {
		r := p.rules[i]
		if r.Plans != nil {
			r = r.PlanFor(c)
		}
		if err := r.Identify(c, &w); err != nil {
			p.identityFailed(c, &r.Base, err)
			return false
		}
		p.setCall(req, i, r, &w, r.Cost)
		if r.CostFunc != nil {
			req.calls[i].cost = r.CostFunc(c)
		}
	}
	return true
}

// inFlight reports whether req is the in-flight step's (newSlotRequest),
// whose rules are the policy's in-flight rules: only that request has no
// calls, as a request of the rate rules always has (alloc).
func (req *request) inFlight() bool { return req.calls == nil }

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
	p.fleet.Touch()
	req := p.newRequest(rule.Scope{Route: key})
	for i, r := range p.rules {
		p.setCall(req, i, r, nil, n)
	}
	d, err := p.decide(ctx, req)
	if len(p.observers) > 0 {
		req.d = d
		p.observe(ctx, "", req, time.Since(start)) // Event.Route is "" outside gin
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
		if cl.cost > cl.rule.MaxCost {
			return tooCostly(cl.rule, cl.cost, p.named), nil
		}
	}
	var wctx context.Context // the bound on waiting in the deny cache, made when needed
	for {
		turn, i, byBan := p.enter(req)
		if turn.Verdict == state.Reject {
			p.strikeAll(req, i, byBan)
			cl := &req.calls[i]
			if byBan {
				return cached(&cl.rule.Ban.Base, turn.Answer(), true), nil // the cheap path
			}
			return cached(&cl.rule.Base, turn.Answer(), false), nil
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
	if p.bans {
		p.bringStrikes(req) // only a route with a Ban carries strikes
	}
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

// gone is the decision, and the error, of a request whose own context
// ended before Redis answered (ErrClientGone): refused, and decided by
// nobody. The error names the route and the rules, never the identity.
func (p *Policy) gone(req *request, err error) (Decision, error) {
	first := req.calls[0].rule
	err = fmt.Errorf("ginlimit: %s: %w", p.describe(req), err)
	return Decision{Rule: first.Name, Limit: first.Limit, Window: first.Window, Source: Source(first.Source), Err: err, decider: &first.Base}, err
}

// enter asks each call's deny caches, its Ban's then its rule's, whether
// it may go to Redis. On a certain rejection or a wait, it releases what
// it counted and returns the call that decided, and whether its Ban did.
func (p *Policy) enter(req *request) (state.Turn, int, bool) {
	for i := range req.calls {
		cl := &req.calls[i]
		if cl.ban != nil {
			if turn := enterShare(cl.rule.Ban.Deny, cl.ban); turn.Verdict != state.Send {
				p.release(req.calls[:i])
				return turn, i, true
			}
		}
		if turn := enterShare(cl.rule.Deny, &cl.share); turn.Verdict != state.Send {
			p.release(req.calls[:i])
			releaseShare(cl.banDeny(), cl.ban)
			return turn, i, false
		}
	}
	return state.Turn{Verdict: state.Send}, 0, false
}

// enterShare asks deny, when there is one, whether share s may go to Redis, and
// keeps its ticket when it may.
func enterShare(deny *state.DenyCache, s *share) state.Turn {
	if deny == nil {
		return state.Turn{Verdict: state.Send}
	}
	turn := deny.Enter(s.key, s.cost)
	if turn.Verdict == state.Send {
		s.ticket = turn.Ticket
	}
	return turn
}

// banDeny is the deny cache of cl's Ban, or nil for a call without one.
func (cl *call) banDeny() *state.DenyCache {
	if cl.ban == nil {
		return nil
	}
	return cl.rule.Ban.Deny
}

// release lets go of the calls the deny caches counted and that were not
// sent.
func (p *Policy) release(calls []call) {
	for i := range calls {
		cl := &calls[i]
		releaseShare(cl.banDeny(), cl.ban)
		releaseShare(cl.rule.Deny, &cl.share)
	}
}

// releaseShare lets go of share s, which deny counted (when there is one).
func releaseShare(deny *state.DenyCache, s *share) {
	if deny != nil {
		deny.Release(s.key, s.ticket)
		s.ticket = state.Ticket{}
	}
}

// leave tells each deny cache of req what the call proved: d, or each
// share's own decision when there are several (ok is false when Redis
// could not decide, which proves nothing).
func (p *Policy) leave(req *request, d *Decision, each []Decision, ok bool) {
	for i := range req.calls {
		cl, at := &req.calls[i], req.rec(i)
		if cl.ban != nil {
			leaveShare(cl.rule.Ban.Deny, cl.ban, answerOf(d, each, at-1), ok)
		}
		leaveShare(cl.rule.Deny, &cl.share, answerOf(d, each, at), ok)
	}
}

// leaveShare tells deny (when there is one) what the call proved for share
// s: a, unless Redis could not decide (ok false).
func leaveShare(deny *state.DenyCache, s *share, a state.Answer, ok bool) {
	switch {
	case deny == nil:
		return
	case !ok:
		deny.Release(s.key, s.ticket)
	default:
		deny.Leave(s.key, s.ticket, a)
	}
	s.ticket = state.Ticket{}
}

// answerOf is what Redis answered for the share of record rec: d, or its
// own decision among each when there are several.
func answerOf(d *Decision, each []Decision, rec int) state.Answer {
	if each != nil {
		return each[rec].answer()
	}
	return d.answer()
}

// call returns the script that decides req and its arguments: for one
// call, its rule's single-rule script, which has the rule's settings
// written in, with the test clock ("" for Redis TIME) and the cost; for
// several, the several-rule script (see package lua).
func (p *Policy) call(req *request) (*redis.Script, []any) {
	if len(req.keys) != 1 {
		return severalScript, p.severalArgs(req)
	}
	cl := req.calls[0]
	if cl.rule.Script == nil { // an override (see rule.CompileRate)
		return severalScript, p.severalArgs(req)
	}
	if p.clock == nil && cl.cost == cl.rule.Cost {
		return cl.rule.Script, cl.rule.Args
	}
	clock := any("")
	if p.clock != nil {
		clock = p.clock()
	}
	return cl.rule.Script, rule.SingleArgs(clock, cl.cost)
}

// severalArgs returns the several-rule script's arguments for req: each
// record's, its rule's settings and its cost.
func (p *Policy) severalArgs(req *request) []any {
	args := p.newArgs(len(req.keys))
	for i := range req.calls {
		cl, at := &req.calls[i], req.rec(i)
		if cl.ban != nil {
			putRecord(args, at-1, cl.rule.Ban.Settings, cl.ban.cost)
		}
		putRecord(args, at, cl.rule.Settings, cl.cost)
	}
	return args
}

// newArgs returns the several-rule script's arguments for n records: the
// test clock ("" for Redis TIME), and room for each record's (putRecord).
func (p *Policy) newArgs(n int) []any {
	args := make([]any, lua.ArgRules+lua.ArgsPerRule*n)
	args[lua.ArgClock] = ""
	if p.clock != nil {
		args[lua.ArgClock] = p.clock()
	}
	return args
}

// putRecord writes the arguments of record rec: its rule's settings (see
// rule.Args) and its cost.
func putRecord(args []any, rec int, settings []any, cost int) {
	at := lua.ArgRules + lua.ArgsPerRule*rec
	copy(args[at:at+lua.ArgsPerRule], settings)
	args[at+lua.ArgCost] = cost
}

// parse checks and converts the script's reply {now_us, fired, then per
// record: ok, remaining, reset_us, retry_us} into the decision, and, when
// there are several records, each one's own decision, by record (for the
// deny caches). The decision is the firing call's (with the longest retry
// among the records that rejected) or, when admitted, the call with the
// least remaining. A Ban is folded into its rule: a banned identity's
// decision is the ban's, with Banned set. For a route declared with
// Rules, Rules holds every call's decision.
func (p *Policy) parse(req *request, reply []int64) (Decision, []Decision, error) {
	return p.parseFor(req, reply, p.named)
}

// parseFor is parse, with Rules filled when every is true.
func (p *Policy) parseFor(req *request, reply []int64, every bool) (Decision, []Decision, error) {
	n := len(req.keys)
	now, fired, err := replyHead(reply, n, lua.ReplyPerRule)
	if err != nil {
		return Decision{}, nil, err
	}
	if n == 1 && !every {
		return callDecision(&req.calls[0].rule.Base, reply, 0, fired, now, false), nil, nil
	}
	each := make([]Decision, n)
	rules := make([]Decision, len(req.calls))
	best := -1
	for i := range req.calls {
		var firedHere bool
		rules[i], firedHere = req.calls[i].decision(req.rec(i), reply, each, fired, now)
		switch {
		case firedHere:
			best = i
		case fired == 0 && (best < 0 || rules[i].Remaining < rules[best].Remaining):
			best = i
		}
	}
	var retry time.Duration
	for _, e := range each {
		retry = max(retry, e.RetryAfter)
	}
	d := rules[best]
	d.RetryAfter = retry
	if every {
		d.Rules = rules
	}
	return d, each, nil
}

// decision is cl's decision, at record rec (see rec), from the script's
// reply, its Ban's folded in, and whether one of its records fired; each
// gets its records' own decisions.
func (cl *call) decision(rec int, reply []int64, each []Decision, fired int, now time.Time) (Decision, bool) {
	each[rec] = callDecision(&cl.rule.Base, reply, rec, fired, now, false)
	d, firedHere := each[rec], fired == rec+1
	if cl.ban != nil {
		each[rec-1] = callDecision(&cl.rule.Ban.Base, reply, rec-1, fired, now, true)
		if each[rec-1].Banned {
			d = each[rec-1]
		}
		firedHere = firedHere || fired == rec
	}
	return d, firedHere
}

// callDecision is the decision of record rec, of rule r (a Ban's when ban
// is true), alone, from the script's reply (see parseFor), fired and now
// being the reply's header.
func callDecision(r *rule.Base, reply []int64, rec, fired int, now time.Time, ban bool) Decision {
	a := answerAt(reply, rec, now)
	d := Decision{
		Rule:      r.Name,
		Allowed:   fired == 0,
		Limit:     r.Limit,
		Window:    r.Window,
		Source:    Source(r.Source),
		Remaining: a.Remaining,
		Reset:     a.Reset,
		Time:      a.At,
		decider:   r,
	}
	// A ban reports 0 remaining for a banned identity, from the request
	// that made the ban on (lua/penalty.lua); that request reads as
	// banned when it was refused anyway.
	if reply[lua.At(rec, lua.ReplyOK)] == 0 || ban && d.Remaining == 0 && fired != 0 {
		d.RetryAfter = time.Duration(reply[lua.At(rec, lua.ReplyRetry)]) * time.Microsecond
		d.Banned = ban
	}
	return d
}

// answerAt is record rec's answer in the script's reply, whose time is now.
func answerAt(reply []int64, rec int, now time.Time) state.Answer {
	return state.Answer{
		// A key can hold more than the limit (a limit lowered on
		// redeploy, two rules sharing a key): remaining is never
		// reported below 0.
		Remaining: int(max(reply[lua.At(rec, lua.ReplyRemaining)], 0)),
		Reset:     time.Duration(reply[lua.At(rec, lua.ReplyReset)]) * time.Microsecond,
		At:        now,
	}
}

// replyHead checks that a decision script's reply (the decision scripts',
// see package lua, and the in-flight acquire's, see inflight.lua) is its
// header and per integers for each of n records, and returns the header:
// the Redis time, and the 1-based index of the record that fired (0:
// none).
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
// the answer Redis would give; banned says r is a Ban's.
func cached(r *rule.Base, a state.Answer, banned bool) Decision {
	return Decision{
		Rule:       r.Name,
		Limit:      r.Limit,
		Window:     r.Window,
		Source:     Source(r.Source),
		Remaining:  a.Remaining,
		Reset:      a.Reset,
		RetryAfter: a.Reset,
		Time:       a.At,
		Cached:     true,
		Banned:     banned,
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
func tooCostly(r *rule.Rate, cost int, named bool) Decision {
	what := "the rule"
	if named {
		what = "rule " + r.Name
	}
	return Decision{
		Rule: r.Name, Limit: r.Limit, Window: r.Window, Source: Source(r.Source), decider: &r.Base,
		Reason: "the request costs " + strconv.Itoa(cost) + ", more than " + what + " can ever admit (" + strconv.Itoa(r.MaxCost) + ")",
	}
}

// learn tells the fallback of each rule of req, and of its Ban, what Redis
// answered for its key (d, or each share's own decision when there are
// several), so that a fallback decision continues from it. sent is when
// the call was sent.
func (p *Policy) learn(req *request, d *Decision, each []Decision, sent time.Time) {
	for i := range req.calls {
		cl, at := &req.calls[i], req.rec(i)
		if b := cl.rule.Ban; b != nil && b.Local != nil {
			b.Local.Learn(cl.ban.key, answerOf(d, each, at-1), sent)
		}
		if cl.rule.Local != nil {
			cl.rule.Local.Learn(cl.key, answerOf(d, each, at), sent)
		}
	}
}
