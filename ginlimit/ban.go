package ginlimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/lua"
)

// Bans: a rate rule with [Ban] carries a rule.Ban, compiled in internal/rule and decided
// in the same script call, before its rule, on a key in the same slot; the
// pipeline folds its decision into the rule's (pipeline.go: parse).

// banAlg is a ban's AlgorithmKind: its name, "penalty", gives its number
// in the several-rule scripts (lua.Numbered). It is not an algorithm a
// rule can choose.
const banAlg AlgorithmKind = "penalty"

// DefaultBanMessage is the message of the 429 a banned identity gets. A
// [Respond] function can write another, reading [Decision.Banned].
const DefaultBanMessage = "You are temporarily banned for sending too many requests, please try again later"

// MaxBan is the longest ban [Ban] takes: 1e9 milliseconds, about 11.6
// days. The script counts a ban in milliseconds, its param, and takes at
// most lua.MaxParam of them (lua/rule.lua), so a longer one would be
// refused by Redis on every decision; [Ban] refuses it at start-up instead.
const MaxBan = lua.MaxParam * time.Millisecond

// Ban bans an identity from the rule for duration once it has collected
// after refusals within within: while banned, every request of that
// identity on the rule gets 429 with [DefaultBanMessage] ([Respond] can
// write another when [Decision.Banned]), a Retry-After of the time the ban
// has left, and the outcome [OutcomeBanned].
//
// Every refusal on the route counts (this rule's, another [Rule]'s, an
// [InFlight] rule's), including those answered from the deny cache, which
// are reported with the key's next call or at most [DefaultMaxStaleness]
// later, before that call's request is judged. The strikes and the ban
// live in Redis, decided in the rule's own call, so every instance shares
// them. [Policy.Peek] shows a ban, [Policy.Reset] lifts it. after is 1 to
// 1e6, within 1 ms to about 31 years, duration 1 ms to [MaxBan]; with
// [LimitBy] every plan has its own strikes and bans.
func Ban(after int, within, duration time.Duration) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		switch {
		case after < 1 || after > 1e6:
			return fmt.Errorf("Ban(%d, %v, %v): want 1 to 1e6 refusals", after, within, duration)
		case within < time.Millisecond || within > rule.MaxWindow:
			return fmt.Errorf("Ban(%d, %v, %v): the period must be from 1ms to %v", after, within, duration, rule.MaxWindow)
		case duration < time.Millisecond || duration > MaxBan:
			return fmt.Errorf("Ban(%d, %v, %v): the ban must last from 1ms to %v", after, within, duration, MaxBan)
		}
		r.Rate.Ban = &rule.BanConfig{After: after, Within: within.Truncate(time.Microsecond), Duration: duration.Truncate(time.Millisecond), Message: DefaultBanMessage}
		return nil
	})
}

// strikeAll records a refusal of req answered in process, by its call i
// (by its Ban when byBan), as a strike for every Ban of the route, as in
// Redis (lua/penalty.lua): each is told with the next call on its rule's
// key. A ban's own refusal is no strike for that ban (its report counts
// nothing while it holds).
func (p *Policy) strikeAll(req *request, i int, byBan bool) {
	for j := range req.calls {
		if cl := &req.calls[j]; cl.ban != nil && !(j == i && byBan) {
			p.carry(*cl, 1)
		}
	}
}

// bringStrikes puts on the Ban's share of each call of req the refusals
// its rule's deny cache answered since the key's last call: they are
// strikes too.
func (p *Policy) bringStrikes(req *request) {
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
func (p *Policy) restoreStrikes(req *request) {
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
func (p *Policy) carry(cl call, n int64) {
	if !cl.rule.Deny.StrikeN(cl.key, n) {
		return
	}
	// The report runs later, on a timer: it keeps a copy of the Ban's
	// share, never a pointer into the request's memory.
	ban := *cl.ban
	cl.ticket, ban.ticket, cl.ban = state.Ticket{}, state.Ticket{}, &ban
	time.AfterFunc(cl.rule.Deny.Staleness(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
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
func (p *Policy) reportStrikes(ctx context.Context, calls []call, add int64) {
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
	args := p.newArgs(len(keys))
	for rec, cl := range report {
		b := cl.rule.Ban
		if b.Deny != nil {
			cl.ban.ticket = b.Deny.Stamp()
		}
		putRecord(args, rec, b.Settings, cl.ban.cost)
	}
	reply, _, err := p.engine.Run(ctx, p.queue, p.timeout, severalScript, keys, args)
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
