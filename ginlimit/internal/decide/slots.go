package decide

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/lua"
	"github.com/redis/go-redis/v9"
)

// slotScript is lua/inflight.lua.
var slotScript = redis.NewScript(lua.InFlight())

// slotCall is a slot of one in-flight rule on one key (see holding.local).
type slotCall struct {
	rule *rule.InFlight
	key  string
}

// slotArgs returns the script's arguments for op on the slots of rules.
func (p *Route) slotArgs(rules []*rule.InFlight, op, holder string) []any {
	args := make([]any, lua.InFlightArgRules, lua.InFlightArgRules+lua.InFlightArgsPerRule*len(rules))
	if p.Clock != nil {
		args[lua.ArgClock] = p.Clock()
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
func (p *Route) takeSlots(ctx context.Context, req *request) (*holding, error) {
	h := &holding{p: p, req: req, holder: newHolder(), ctx: context.WithoutCancel(ctx)}
	reply, brk, err := p.Engine.Run(ctx, p.Queue, p.Timeout, slotScript, req.keys, p.slotArgs(p.Slots, "acquire", h.holder))
	if err == nil {
		if req.d, err = p.parseSlots(p.Slots, reply); err == nil {
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
	err = fmt.Errorf("ginlimit: %s: %w", p.describe(req), err)
	first := p.Slots[0]
	switch {
	case gone:
		// No fallback decides for a client that has gone (engine.ErrClientGone).
		req.d = Decision{Rule: first.Name, Limit: first.Limit, decider: &first.Base}
	case p.OnFail == FailLocal && !saturated && p.RuleRoute.Instances.Heard():
		req.d = p.takeLocal(req, h)
	default:
		// A saturated process is refused under every policy: only Redis
		// grants while Redis is healthy (see engine.ErrSaturated).
		req.d = Decision{Rule: first.Name, Allowed: p.OnFail == FailOpen && !saturated, Limit: first.Limit, decider: &first.Base}
	}
	req.d.Err = err
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
func (p *Route) parseSlots(rules []*rule.InFlight, reply []int64) (Decision, error) {
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

// takeLocal takes a slot of every rule's in-process count, all or none:
// the FailLocal fallback of the in-flight step.
func (p *Route) takeLocal(req *request, h *holding) Decision {
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

// PeekSlots is [Policy.Peek] for an in-flight rule: Limit is n, Remaining
// the slots free now, and Allowed whether a request would get one.
func (p *Route) PeekSlots(ctx context.Context, r *rule.InFlight, key string) (Decision, error) {
	rules := []*rule.InFlight{r}
	reply, _, err := p.Engine.Run(ctx, p.Queue, p.Timeout, slotScript, []string{key}, p.slotArgs(rules, "peek", "peek"))
	if err == nil {
		var d Decision
		if d, err = p.parseSlots(rules, reply); err == nil {
			return d, nil
		}
	}
	return Decision{}, fmt.Errorf("ginlimit: Peek: rule %q: %w", r.Name, err)
}

// holding is what one request holds while its chain runs: a lease in
// Redis on each in-flight rule's key (renewed every lease/3), or slots of
// the in-process counts. It gives them back once, on release.
type holding struct {
	p      *Route
	req    *request // the in-flight step's: its keys are p.Slots'
	holder string
	ctx    context.Context // the request's values, never cancelled
	redis  bool            // holds (or may hold) a lease in Redis
	// uncertain: the acquire failed, so the lease is given back in the
	// background, best effort.
	uncertain bool
	local     []slotCall // the slots held in process

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// renewEvery is how often a lease is renewed: three times per lease, so
// that one failed renewal does not lose the slot.
func (h *holding) renewEvery() time.Duration {
	lease := h.p.Slots[0].Lease
	for _, r := range h.p.Slots[1:] {
		lease = min(lease, r.Lease)
	}
	return max(lease/3, time.Millisecond)
}

// renewLater schedules the next renewal renewEvery after the last began,
// spent ago, unless the holding was released. Counting from its start,
// not its end, keeps the renewals lease/3 apart at Redis however long each
// call took (a loaded machine, a slow reply): a call's time is not added
// to the gap the lease must cover.
func (h *holding) renewLater(spent time.Duration) {
	next := max(h.renewEvery()-spent, 0)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if h.timer == nil {
		h.timer = time.AfterFunc(next, h.renew)
		return
	}
	h.timer.Reset(next)
}

// renew extends the leases to now + lease. A lease that had already
// lapsed is not renewed (its slot may be someone else's by now): that, and
// a failed renewal, is logged. The renewal after a release does nothing
// (the script renews only a lease that is there).
func (h *holding) renew() {
	start := time.Now()
	p := h.p
	reply, _, err := p.Engine.Aside(h.ctx, p.Timeout, slotScript, h.req.keys, p.slotArgs(p.Slots, "renew", h.holder))
	if err == nil {
		if n, ok := one(reply); !ok {
			err = fmt.Errorf("unexpected reply %v", reply)
		} else if int(n) < len(h.req.keys) && !h.released() {
			err = errors.New("the lease lapsed while the handler ran: the slot may be serving another request")
		}
	}
	if err != nil {
		p.Logs.Log(h.ctx, p.Logger, slog.LevelWarn, "ginlimit: could not renew an in-flight slot",
			slog.String("route", h.req.scope.Label()), slog.String("rule", h.p.Slots[0].Name), ErrAttr(err))
	}
	h.renewLater(time.Since(start))
}

// one returns the one integer of a reply {n}.
func one(reply []int64) (int64, bool) {
	if len(reply) != 1 {
		return 0, false
	}
	return reply[0], true
}

// released reports whether the holding was released.
func (h *holding) released() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// release gives back what the request holds: it stops the renewals, removes
// the leases from Redis (bounded by the Timeout; if that fails, the lease
// frees the slot, and a warning is logged) and gives back the in-process
// slots.
func (h *holding) release() {
	h.mu.Lock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	if !h.redis {
		h.giveLocal()
		return
	}
	p := h.p
	if h.uncertain {
		h.giveLocal()
		go func() {
			_, _, _ = p.Engine.Aside(h.ctx, p.Timeout, slotScript, h.req.keys, p.slotArgs(p.Slots, "release", h.holder))
		}()
		return
	}
	// The in-process count keeps the slot until Redis has it back.
	defer h.giveLocal()
	_, _, err := p.Engine.Aside(h.ctx, p.Timeout, slotScript, h.req.keys, p.slotArgs(p.Slots, "release", h.holder))
	if err != nil {
		p.Logs.Log(h.ctx, p.Logger, slog.LevelWarn, "ginlimit: could not release an in-flight slot; its lease will free it",
			slog.String("route", h.req.scope.Label()), slog.String("rule", h.p.Slots[0].Name), ErrAttr(err))
	}
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

// errAllowInFlight is the error of Policy.Allow on a policy with in-flight
// rules.
var errAllowInFlight = errors.New("ginlimit: Policy.Allow: the policy has in-flight rules (InFlight), which hold a slot while a handler runs: attach it to a route with Limiter.RateLimit")
