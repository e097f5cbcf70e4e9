package ginlimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/lua"
)

// Bans: a rule with [Ban] gets a companion rule, the penalty (lua/penalty.lua),
// compiled here beside it and decided in the same script call, before it,
// on a key in the same slot. The penalty refuses while the identity is
// banned and counts strikes when a request is refused; the pipeline folds
// its decision into the rule's (pipeline.go: parse), so a ban reads as the
// rule's refusal with Banned set and the ban's message.

// penaltyAlg is the penalty's AlgorithmKind: its name, "penalty", gives
// its number in the several-rule scripts (lua.Numbered). It is not an
// algorithm a rule can choose.
const penaltyAlg AlgorithmKind = "penalty"

// DefaultBanMessage is the message of the 429 a banned identity gets. A
// [Respond] function can write another, reading [Decision.Banned].
const DefaultBanMessage = "You are temporarily banned for sending too many requests, please try again later"

// ban is what [Ban] configures.
type ban struct {
	after    int
	within   time.Duration
	duration time.Duration
	message  string
}

// MaxBan is the longest ban [Ban] takes: 1e9 milliseconds, about 11.6
// days. The penalty script counts a ban in milliseconds, its param, and
// takes at most lua.MaxParam of them (lua/rule.lua), so a longer one would be refused by Redis on
// every decision; [Ban] refuses it at start-up instead.
const MaxBan = lua.MaxParam * time.Millisecond

// Ban bans an identity from the rule for duration once it has collected
// after refusals within within: while banned, every request of that
// identity on the rule is refused with 429, the ban's own message
// ([DefaultBanMessage]; [Respond] can write any other from
// [Decision.Banned]) and a Retry-After of the time the ban has left,
// [Decision.Banned] set and the outcome [OutcomeBanned] for observers.
//
// A refusal counts whatever refused the request on the route (this rule,
// another of its [Rule]s, or an [InFlight] rule, whose refusals are
// reported at once). The strikes and the ban live in Redis, decided
// atomically with the rule in the same call, so every instance shares them.
// Refusals an instance answers from its deny cache count too: it reports
// them with its next Redis call on the key, or on their own at most
// [DefaultMaxStaleness] after the first, so a flood answered from the cache is
// banned as surely as one answered by Redis. The strikes a call reports
// count before its request is judged, so a client they put over the limit
// is refused by the ban on its very next request. [Policy.Peek] shows a
// ban, [Policy.Reset] lifts it (and forgets the strikes); the [FailLocal]
// fallback starts no ban but keeps the one Redis last reported.
//
// after must be from 1 to 1e6, within from 1 ms to about 31 years, as a
// Window, and duration from 1 ms to [MaxBan] (about 11.6 days). A route's
// rule may have one ban; with [LimitBy] every plan has its own
// strikes and bans.
func Ban(after int, within, duration time.Duration) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		switch {
		case after < 1 || after > 1e6:
			return fmt.Errorf("Ban(%d, %v, %v): want 1 to 1e6 refusals", after, within, duration)
		case within < time.Millisecond || within > maxWindow:
			return fmt.Errorf("Ban(%d, %v, %v): the period must be from 1ms to %v", after, within, duration, maxWindow)
		case duration < time.Millisecond || duration > MaxBan:
			return fmt.Errorf("Ban(%d, %v, %v): the ban must last from 1ms to %v", after, within, duration, MaxBan)
		}
		r.ban = &ban{after: after, within: within.Truncate(time.Microsecond), duration: duration.Truncate(time.Millisecond), message: DefaultBanMessage}
		return nil
	})
}

// compileBan compiles r's penalty from rc: the rule's name, dimensions and
// identity, its own key prefix ("<prefix>ban:"), and the ban's settings as
// its window, limit and param. It reports the rule's limit and policy, so
// that a ban's headers read as the rule's.
func (r *rule) compileBan(rc ruleConfig, route *routeConfig, named bool) error {
	b := *rc.ban
	pc := rc
	pc.ban, pc.plans, pc.planPick = nil, nil, nil
	pc.alg, pc.prefix, pc.name = penaltyAlg, r.prefix+"ban:", r.name
	pc.window, pc.limit, pc.message, pc.cost, pc.costFunc = b.within, b.after, b.message, 1, nil
	pr, err := compileRule(pc, route, named)
	if err != nil {
		return fmt.Errorf("Ban: %w", err)
	}
	pr.penalty = true
	pr.maxCost = lua.MaxCost // its cost is strikes, not units of a request
	pr.settings[lua.ArgParam] = int(b.duration.Milliseconds())
	pr.limit, pr.limitText, pr.policyHeader = r.limit, r.limitText, r.policyHeader
	if pr.local != nil {
		// A ban is Redis's: the fallback starts none, but keeps the one
		// Redis last reported.
		pr.local = state.NewBans(DefaultLocalKeys)
	}
	r.ban = pr
	return nil
}

// strike records a refusal answered in process as a strike for the Ban of
// req.calls[j], whose penalty is req.calls[j-1] (see carry).
func (p *Policy) strike(req *request, j int) {
	p.carry(req.calls[j-1], req.calls[j], 1)
}

// carry adds n strikes to those carried in process for the Ban of owner,
// whose penalty call is pc, to go to Redis with the key's next call. The
// first strike carried on a key also schedules a report of them a
// staleness bound later, which finds nothing to send if a call took them
// first: so carried strikes reach Redis, and every instance, within
// MaxStaleness even when the client sends nothing more here; strikes
// given back after a failed call schedule a new report.
func (p *Policy) carry(pc, owner call, n int64) {
	if !owner.rule.deny.StrikeN(owner.key, n) {
		return
	}
	pc.ticket, owner.ticket = state.Ticket{}, state.Ticket{}
	pair := []call{pc, owner}
	time.AfterFunc(owner.rule.deny.Staleness(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		defer cancel()
		p.reportStrikes(ctx, &request{calls: pair}, 0)
	})
}

// reportStrikes sends Redis, in one call of the penalties alone, the
// strikes carried for each Ban among req's calls, plus add each (an
// in-flight refusal of the request): the penalty counts them and bans at
// once when they reach its limit, so the next request is refused on every
// instance. What Redis answers is kept as any answer is (the deny cache
// and the fallback learn a ban). When Redis does not answer, the strikes
// go back to be carried.
func (p *Policy) reportStrikes(ctx context.Context, req *request, add int64) {
	var sub request
	var owners []call
	for j := range req.calls {
		pc := &req.calls[j]
		if !pc.rule.penalty {
			continue
		}
		owner := req.calls[j+1]
		n := add + owner.rule.deny.Drain(owner.key)
		if n <= 0 {
			continue
		}
		sub.calls = append(sub.calls, call{rule: pc.rule, key: pc.key, cost: int(min(1+n, lua.MaxCost))})
		sub.keys = append(sub.keys, pc.key)
		owners = append(owners, owner)
	}
	if len(sub.calls) == 0 {
		return
	}
	sent := time.Now()
	for i, cl := range sub.calls {
		if cl.rule.deny != nil {
			sub.calls[i].ticket = cl.rule.deny.Stamp()
		}
	}
	reply, _, err := p.engine.Run(ctx, p.queue, p.timeout, severalScript, sub.keys, p.severalArgs(&sub))
	var now time.Time
	if err == nil {
		now, _, err = replyHead(reply, len(sub.calls), lua.ReplyPerRule)
	}
	if err != nil {
		for i, o := range owners {
			p.carry(sub.calls[i], o, int64(sub.calls[i].cost-1))
		}
		return
	}
	for i, cl := range sub.calls {
		a := state.Answer{Remaining: int(max(reply[lua.At(i, lua.ReplyRemaining)], 0)), Reset: time.Duration(reply[lua.At(i, lua.ReplyReset)]) * time.Microsecond, At: now}
		if cl.rule.deny != nil {
			cl.rule.deny.Leave(cl.key, cl.ticket, a)
		}
		if cl.rule.local != nil {
			cl.rule.local.Learn(cl.key, a, sent)
		}
	}
}
