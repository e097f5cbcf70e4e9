package decide

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/lua"
	"github.com/redis/go-redis/v9"
)

// The several-rule scripts are immutable: redis.Script holds only the
// source and its SHA1, and Run sends EVALSHA and falls back to EVAL on
// NOSCRIPT. They number the algorithms as lua.Numbered lists them (see
// rule.Args). Each rule's single-rule script has its settings written
// into it (lua.Single, in rule.CompileRate).
var (
	severalScript = redis.NewScript(lua.Several())
	// peekScript is severalScript recording nothing: Policy.Peek.
	peekScript = redis.NewScript(lua.Peek())
)

// Scripts are the scripts every engine loads at start-up, besides the
// fleet's; each rule's single-rule script is loaded when its route is
// ready (Route.Ready).
func Scripts() []*redis.Script { return []*redis.Script{severalScript, peekScript, slotScript} }

// decide takes the decision on the calls of req: a cost no rule can admit
// is refused at once; a rejection the deny cache is certain of is answered
// from it; otherwise one script call decides every rule. When Redis cannot
// decide, the failure policy does; when this process could not get the call
// to Redis in time (engine.ErrSaturated), the saturation answer does (see failed).
func (req *request) decide(ctx context.Context) (Decision, error) {
	p := req.p
	for i := range req.calls {
		cl := &req.calls[i]
		cl.cost = max(cl.cost, 1)
		if cl.cost > cl.rule.MaxCost {
			return tooCostly(cl.rule, cl.cost, p.Named), nil
		}
	}
	var wctx context.Context // the bound on waiting in the deny cache, made when needed
	for {
		turn, i, byBan := req.enter()
		if turn.Verdict == state.Reject {
			req.strikeAll(i, byBan)
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
			wctx, cancel = context.WithTimeoutCause(ctx, p.Queue, engine.ErrQueueTimedOut)
			defer cancel()
		}
		if err := turn.Await(wctx); err != nil {
			if ctx.Err() != nil {
				return req.gone(fmt.Errorf("%w: %w", engine.ErrClientGone, context.Cause(ctx)))
			}
			return req.failed(fmt.Errorf("%w: %w", engine.ErrSaturated, err))
		}
	}
	return req.ask(ctx)
}

// ask decides req with one script call, and with the failure policy, or
// as a client that has gone, when Redis does not answer.
func (req *request) ask(ctx context.Context) (Decision, error) {
	p := req.p
	if p.bans {
		req.bringStrikes() // only a route with a Ban carries strikes
	}
	script, args := req.script()
	var sent time.Time
	if p.OnFail == FailLocal {
		sent = time.Now()
	}
	reply, brk, err := p.runScript(ctx, script, req.keys, args)
	var d Decision
	var each []Decision
	if err == nil {
		if d, each, err = req.parse(reply, req.p.Named); err == nil && p.OnFail == FailLocal {
			req.learn(&d, each, sent)
		}
	}
	req.leave(&d, each, err == nil)
	if err != nil {
		req.restoreStrikes()
		if ctx.Err() != nil {
			// However the call ended, the request's context ended first:
			// no fallback decides for a client that has gone.
			if !errors.Is(err, engine.ErrClientGone) {
				err = fmt.Errorf("%w: %w", engine.ErrClientGone, err)
			}
			d, err = req.gone(err)
		} else {
			d, err = req.failed(err)
		}
	}
	d.brk = brk
	return d, err
}

// runScript sends one of p's script calls (Engine.Run): a decision's, an
// in-flight step's, a report of strikes or a peek, bounded by the route's
// QueueTimeout and Timeout.
func (p *Route) runScript(ctx context.Context, s *redis.Script, keys []string, args []any) ([]int64, *engine.Breaker, error) {
	return p.Engine.Run(ctx, p.Queue, p.Timeout, s, keys, args)
}

// gone is the decision, and the error, of a request whose own context
// ended before Redis answered (engine.ErrClientGone): refused, and decided by
// nobody. The error names the route and the rules, never the identity.
func (req *request) gone(err error) (Decision, error) {
	first := req.calls[0].rule
	err = fmt.Errorf("ginlimit: %s: %w", req.describe(), err)
	return Decision{Rule: first.Name, Limit: first.Limit, Window: first.Window, Source: Source(first.Source), Err: err, decider: &first.Base}, err
}

// enter asks each call's deny caches, its Ban's then its rule's, whether
// it may go to Redis. On a certain rejection or a wait, it releases what
// it counted and returns the call that decided, and whether its Ban did.
func (req *request) enter() (state.Turn, int, bool) {
	for i := range req.calls {
		cl := &req.calls[i]
		if cl.ban != nil {
			if turn := enterShare(cl.rule.Ban.Deny, cl.ban); turn.Verdict != state.Send {
				release(req.calls[:i])
				return turn, i, true
			}
		}
		if turn := enterShare(cl.rule.Deny, &cl.share); turn.Verdict != state.Send {
			release(req.calls[:i])
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
func release(calls []call) {
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
func (req *request) leave(d *Decision, each []Decision, ok bool) {
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
func (req *request) script() (*redis.Script, []any) {
	p := req.p
	if len(req.keys) != 1 {
		return severalScript, req.severalArgs()
	}
	cl := req.calls[0]
	if cl.rule.Script == nil { // an override (see rule.CompileRate)
		return severalScript, req.severalArgs()
	}
	if p.Clock == nil && cl.cost == cl.rule.Cost {
		return cl.rule.Script, cl.rule.Args
	}
	clock := any("")
	if p.Clock != nil {
		clock = p.Clock()
	}
	return cl.rule.Script, rule.SingleArgs(clock, cl.cost)
}

// severalArgs returns the several-rule script's arguments for req: each
// record's, its rule's settings and its cost.
func (req *request) severalArgs() []any {
	p := req.p
	args := newArgs(p.Clock, len(req.keys))
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
func newArgs(clock func() int64, n int) []any {
	args := make([]any, lua.ArgRules+lua.ArgsPerRule*n)
	args[lua.ArgClock] = ""
	if clock != nil {
		args[lua.ArgClock] = clock()
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
// decision is the ban's, with Banned set. When every is true (a route
// declared with Rules), Rules holds every call's decision.
func (req *request) parse(reply []int64, every bool) (Decision, []Decision, error) {
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
func (req *request) learn(d *Decision, each []Decision, sent time.Time) {
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

// strikeAll records a refusal of req answered in process, by its call i
// (by its Ban when byBan), as a strike for every Ban of the route, as in
// Redis (lua/penalty.lua): each is told with the next call on its rule's
// key. A ban's own refusal is no strike for that ban (its report counts
// nothing while it holds).
func (req *request) strikeAll(i int, byBan bool) {
	p := req.p
	for j := range req.calls {
		if cl := &req.calls[j]; cl.ban != nil && !(j == i && byBan) {
			p.carry(*cl, 1)
		}
	}
}

// bringStrikes puts on the Ban's share of each call of req the refusals
// its rule's deny cache answered since the key's last call: they are
// strikes too.
func (req *request) bringStrikes() {
	for i := range req.calls {
		if cl := &req.calls[i]; cl.ban != nil {
			cl.ban.cost = strikes(cl.rule.Deny.Drain(cl.key))
		}
	}
}

// restoreStrikes gives back the strikes that req's bans carried (see
// bringStrikes) to the deny caches they were drained from, after a call
// that Redis did not answer: they are reported with the key's next call.
// A call that timed out may have run all the same, so a strike can be
// counted twice; it is never lost.
func (req *request) restoreStrikes() {
	p := req.p
	for i := range req.calls {
		if cl := &req.calls[i]; cl.ban != nil && cl.ban.cost > 1 {
			p.carry(*cl, int64(cl.ban.cost-1))
			cl.ban.cost = 1
		}
	}
}

// strikes is the cost of a ban's call that reports n strikes: one for the
// request itself, and n, within what the script takes.
func strikes(n int64) int { return int(min(1+n, lua.MaxCost)) }

// carry adds n strikes to those carried in process for the Ban of cl, to
// go to Redis with the key's next call. The first strike carried on a key
// also schedules a report of them a staleness bound later, which finds
// nothing to send if a call took them first: so carried strikes reach
// Redis, and every instance, within MaxStaleness even when the client sends
// nothing more here; strikes given back after a failed call schedule a new
// report.
func (p *Route) carry(cl call, n int64) {
	if !cl.rule.Deny.StrikeN(cl.key, n) {
		return
	}
	// The report runs later, on a timer: it keeps a copy of the Ban's
	// share, never a pointer into the request's memory.
	ban := *cl.ban
	cl.ticket, ban.ticket, cl.ban = state.Ticket{}, state.Ticket{}, &ban
	time.AfterFunc(cl.rule.Deny.Staleness(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.Timeout)
		defer cancel()
		p.reportStrikes(ctx, []call{cl}, 0)
	})
}

// reportStrikes sends Redis, in one call of the bans alone, the strikes
// carried for the Ban of each of calls, plus add each (an in-flight refusal
// of the request): a ban counts them and bans at once when they reach its
// limit, so the next request is refused on every instance. What Redis
// answers is kept as any answer is (the deny cache and the fallback learn
// a ban). When Redis does not answer, the strikes go back to be carried.
func (p *Route) reportStrikes(ctx context.Context, calls []call, add int64) {
	// The calls whose Ban reports strikes, each with a copy of its Ban's
	// share (the report writes the cost and ticket of its own), whose
	// record is its index.
	var report []call
	var keys []string
	for _, cl := range calls {
		if cl.ban == nil {
			continue
		}
		n := add + cl.rule.Deny.Drain(cl.key)
		if n <= 0 {
			continue
		}
		ban := *cl.ban
		ban.cost, cl.ban = strikes(n), &ban
		keys = append(keys, ban.key)
		report = append(report, cl)
	}
	if len(report) == 0 {
		return
	}
	sent := time.Now()
	args := newArgs(p.Clock, len(keys))
	for rec, cl := range report {
		b := cl.rule.Ban
		if b.Deny != nil {
			cl.ban.ticket = b.Deny.Stamp()
		}
		putRecord(args, rec, b.Settings, cl.ban.cost)
	}
	reply, _, err := p.runScript(ctx, severalScript, keys, args)
	var now time.Time
	if err == nil {
		now, _, err = replyHead(reply, len(keys), lua.ReplyPerRule)
	}
	for rec, cl := range report {
		if err != nil {
			p.carry(cl, int64(cl.ban.cost-1))
			continue
		}
		b, a := cl.rule.Ban, answerAt(reply, rec, now)
		if b.Deny != nil {
			b.Deny.Leave(cl.ban.key, cl.ban.ticket, a)
		}
		if b.Local != nil {
			b.Local.Learn(cl.ban.key, a, sent)
		}
	}
}

// failed is the decision, and the error, when Redis could not decide the
// calls of a request: the in-process fallback's under FailLocal, and
// otherwise the failure policy's. A saturated process (engine.ErrSaturated) is not
// a Redis failure, and only Redis grants while Redis is healthy: it is
// refused under every policy (see [engine.ErrSaturated]). The error names the
// rule and the scope's route, never the key, which holds the identity.
func (req *request) failed(err error) (Decision, error) {
	p := req.p
	first := req.calls[0].rule
	saturated := errors.Is(err, engine.ErrSaturated)
	err = fmt.Errorf("ginlimit: %s: %w", req.describe(), err)
	if p.OnFail == FailLocal && !saturated && p.RuleRoute.Instances.Heard() {
		d := req.decideLocal()
		d.Err = err
		return d, err
	}
	return Decision{Rule: first.Name, Allowed: p.OnFail == FailOpen && !saturated, Limit: first.Limit, Window: first.Window, Source: Source(first.Source), Err: err, decider: &first.Base}, err
}

// describe names what a request was limited by, for error texts: the route
// and the rules, never the identity.
func (req *request) describe() string {
	p := req.p
	where := req.scope.Label()
	if len(p.All) == 1 {
		switch r := p.All[0].(type) {
		case *rule.InFlight:
			return fmt.Sprintf("%s: rule %q (in-flight)", where, r.Name)
		case *rule.Rate:
			return fmt.Sprintf("%s: rule %q (%v)", where, r.Name, r.Alg)
		}
	}
	var names []string
	if req.inFlight() {
		for _, r := range p.Slots {
			names = append(names, r.Name)
		}
	}
	for _, c := range req.calls {
		names = append(names, c.rule.Name)
	}
	return fmt.Sprintf("%s: rules %q", where, names)
}

// decideLocal takes each call's cost from its rule's in-process bucket for
// its key, all or none, and returns the decision of the first rule that
// refused, or of the last rule. A ban Redis reported still refuses.
func (req *request) decideLocal() Decision {
	p := req.p
	now := time.Now()
	if p.LocalClock != nil {
		now = p.LocalClock()
	}
	var d Decision
	for i := range req.calls {
		c := &req.calls[i]
		if b := c.rule.Ban; b != nil && b.Local != nil {
			// The ban is Redis's: the fallback starts none, but keeps the
			// one Redis last reported, whose decision is its rule's.
			if left := b.Local.Banned(c.ban.key, now); left > 0 {
				giveBack(req.calls[:i])
				return Decision{Rule: b.Name, Limit: b.Limit, RetryAfter: left, Reset: left, Time: now,
					Local: true, Banned: true, decider: &b.Base}
			}
		}
		local := c.rule.Local
		if local == nil {
			continue
		}
		left, retry, ok := local.Take(c.key, now, c.cost)
		d = Decision{Rule: c.rule.Name, Allowed: ok, Limit: c.rule.Limit, Window: c.rule.Window, Source: Source(c.rule.Source), Remaining: left, Time: now, Local: true, decider: &c.rule.Base}
		if !ok {
			d.RetryAfter, d.Reset = retry, retry
			giveBack(req.calls[:i])
			return d
		}
		d.Reset = local.UnitRefill()
	}
	return d
}

// giveBack returns the costs that decideLocal took for calls, which a later
// rule refused.
func giveBack(calls []call) {
	for _, c := range calls {
		if c.rule.Local != nil {
			c.rule.Local.Give(c.key, c.cost)
		}
	}
}

// slotScript is lua/inflight.lua.
var slotScript = redis.NewScript(lua.InFlight())

// slotArgs returns the script's arguments for op on the slots of rules.
func slotArgs(clock func() int64, rules []*rule.InFlight, op, holder string) []any {
	args := make([]any, lua.InFlightArgRules, lua.InFlightArgRules+lua.InFlightArgsPerRule*len(rules))
	if clock != nil {
		args[lua.ArgClock] = clock()
	} else {
		args[lua.ArgClock] = ""
	}
	args[lua.InFlightArgOp], args[lua.InFlightArgHolder] = op, holder
	for _, r := range rules {
		at := len(args)
		args = args[:at+lua.InFlightArgsPerRule]
		args[at+lua.InFlightArgLimit], args[at+lua.InFlightArgLease] = r.Limit, r.Lease.Microseconds()
	}
	return args
}

// newHolder returns a holder id: 16 random bytes, unique in practice.
func newHolder() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return string(b[:])
}

// takeSlots is the in-flight step of a request: it takes a slot of every
// in-flight rule for req's keys, all or none, and leaves the decision in
// req.d. It returns what the request holds, to give back once the chain
// returns, or nil when it holds nothing (refused, or let through without a
// slot); and the error when Redis could not decide, whose answer the
// failure policy gave.
func (req *request) takeSlots(ctx context.Context) (*holding, error) {
	p := req.p
	h := &holding{p: p, req: req, holder: newHolder(), ctx: context.WithoutCancel(ctx)}
	reply, brk, err := p.runScript(ctx, slotScript, req.keys, slotArgs(p.Clock, p.Slots, "acquire", h.holder))
	if err == nil {
		if req.d, err = parseSlots(p.Slots, reply); err == nil {
			req.d.brk = brk
			if !req.d.Allowed {
				return nil, nil
			}
			h.redis = true
			h.holdLocal(req)
			h.renewLater(0)
			return h, nil
		}
	}
	// Redis could not decide. Unless the call never left this process,
	// the script may have run and leased a slot: give it back as well, in
	// the background (Redis is failing: the request need not wait for it).
	saturated := errors.Is(err, engine.ErrSaturated)
	gone := errors.Is(err, engine.ErrClientGone) || ctx.Err() != nil
	h.redis = (!engine.NoVerdict(err) || engine.MayHaveRun(err)) && !errors.Is(err, engine.ErrCircuitOpen)
	h.uncertain = true
	if gone && !errors.Is(err, engine.ErrClientGone) {
		err = fmt.Errorf("%w: %w", engine.ErrClientGone, err)
	}
	err = fmt.Errorf("ginlimit: %s: %w", req.describe(), err)
	first := p.Slots[0]
	switch {
	case gone:
		// No fallback decides for a client that has gone (engine.ErrClientGone).
		req.d = Decision{Rule: first.Name, Limit: first.Limit, decider: &first.Base}
	case p.OnFail == FailLocal && !saturated && p.RuleRoute.Instances.Heard():
		req.d = h.takeLocal(req)
	default:
		// A saturated process is refused under every policy: only Redis
		// grants while Redis is healthy (see engine.ErrSaturated).
		req.d = Decision{Rule: first.Name, Allowed: p.OnFail == FailOpen && !saturated, Limit: first.Limit, decider: &first.Base}
	}
	req.d.Err = err
	req.d.brk = brk // so that an outage's failures are logged by OutageLog, not one warning each
	if !req.d.Allowed {
		h.release()
		return nil, err
	}
	return h, err
}

// parseSlots checks and converts the acquire reply {now_us, fired, in_use
// per rule}. The decision is the firing rule's or, when admitted, the
// rule with the fewest slots left; with several in-flight rules, Rules
// holds each one's.
func parseSlots(rules []*rule.InFlight, reply []int64) (Decision, error) {
	n := len(rules)
	now, fired, err := replyHead(reply, n, lua.InFlightPerRule)
	if err != nil {
		return Decision{}, err
	}
	each := make([]Decision, n)
	best := 0
	for i, r := range rules {
		inUse := int(reply[lua.ReplyHead+lua.InFlightPerRule*i+lua.InFlightInUse])
		each[i] = Decision{Rule: r.Name, Allowed: fired == 0, Limit: r.Limit, Remaining: max(r.Limit-inUse, 0), Time: now, decider: &r.Base}
		if fired == 0 && each[i].Remaining < each[best].Remaining {
			best = i
		}
	}
	if fired > 0 {
		best = fired - 1
		each[best].RetryAfter, each[best].Reset = InFlightRetryAfter, InFlightRetryAfter
	}
	d := each[best]
	if n > 1 {
		d.Rules = each
	}
	return d, nil
}

// takeLocal takes a slot of every rule's in-process count for req's
// keys, all or none: the FailLocal fallback of the in-flight step.
func (h *holding) takeLocal(req *request) Decision {
	p := h.p
	now := time.Now()
	var d Decision
	for i, r := range p.Slots {
		cl := slotCall{rule: r, key: req.keys[i]}
		left, ok := r.Local.Take(cl.key)
		d = Decision{Rule: r.Name, Allowed: ok, Limit: r.Limit, Remaining: left, Time: now, Local: true, decider: &r.Base}
		if !ok {
			d.RetryAfter, d.Reset = InFlightRetryAfter, InFlightRetryAfter
			h.giveLocal()
			return d
		}
		h.local = append(h.local, cl)
	}
	return d
}

// holdLocal counts the slots req holds in Redis in each rule's in-process
// count too (when the rule has one), until the holding is released: the
// fallback then never admits more in flight in this process than its cap,
// whoever granted the slots already held.
func (h *holding) holdLocal(req *request) {
	for i, r := range h.p.Slots {
		if r.Local != nil {
			r.Local.Hold(req.keys[i])
			h.local = append(h.local, slotCall{rule: r, key: req.keys[i]})
		}
	}
}

// giveLocal gives back the in-process slots held.
func (h *holding) giveLocal() {
	for _, cl := range h.local {
		cl.rule.Local.Give(cl.key)
	}
	h.local = nil
}
