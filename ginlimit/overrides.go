package ginlimit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// Limits that change at run time: an override replaces a rate rule's limit
// and window while the service runs, for the rule, for one of its plans
// ([LimitBy]) or for one identity. Overrides live in Redis, in one hash
// (LimitsKey), so every instance sees them; each backend of a Limiter
// polls a version key every OverridePoll and, when it moved, loads the
// hash and gives each of its policies a new view (liveView). A request
// reads the view in process (setCall): overrides add no Redis call to a
// decision.
//
// An override compiles into a rule of its own with compileRate, the code
// that compiles a rule at start-up, so that a value the scripts would
// refuse is refused when it is set (SetLimit), naming what is wrong. Its
// rule goes through the several-rule script, whose settings are arguments:
// values an operator sets never load a script into Redis's script cache.

const (
	// LimitsKey is the Redis hash that holds the overrides set with
	// [Policy.SetLimit], one field per override, which names exactly the
	// counts it holds for, as their keys do:
	//
	//   - a rule's: its Key prefix, the scope of its counts in braces, as
	//     in a key ("{GET /api/search}", "{* shared}" for a [Shared]
	//     group, "{* allow}" for every key of [Policy.Allow], "{*
	//     unmatched}"), " rule:<name>" where the keys carry the rule's name
	//     (a route with Rules, a Shared rule), and " *":
	//     "rate_limit:{GET /api/search} *";
	//   - a plan's: the same, its prefix followed by the plan's tag:
	//     "rate_limit:tier=pro:{GET /api/search} *";
	//   - an identity's: the key of its count with the algorithm's tag
	//     left out (escaped, and hashed with [HashIdentities]):
	//     "rate_limit:{GET /api/search user:alice}".
	//
	// The text comes from the rule's configuration and the [Target], each
	// part escaped as in a key: a caller never chooses a field's form. Its
	// value is the limit and the window in µs ("5 0"; a window of 0 is the
	// rule's own). Its version, LimitsKey+":version", is kept beside it in
	// the same Redis Cluster slot, and tells the instances to load it
	// again: to go back to the configuration, clear each override with
	// SetLimit, or delete both keys. A field or value written by hand that
	// does not parse, or does not compile for its rule, is left out.
	LimitsKey = "{ginlimit:limits}"
	// MaxRuleOverrides bounds how many rules' and plans' overrides
	// LimitsKey holds, for every Limiter on that Redis together: SetLimit
	// refuses a new one beyond it. It is a quota of its own, apart from
	// the identities', so that however many identities have one, a rule
	// can always get its first emergency override.
	MaxRuleOverrides = 1_000
	// MaxIdentityOverrides bounds how many identities' overrides LimitsKey
	// holds, for every Limiter on that Redis together: SetLimit refuses a
	// new one beyond it, so that no caller can grow the instances' memory
	// without bound. Each instance keeps them parsed once per backend; a
	// policy compiles one only when a request of its identity comes.
	MaxIdentityOverrides = 10_000
	// OverridePoll is how often each Limiter asks Redis whether the
	// overrides changed: an instance applies a change within OverridePoll
	// plus the poll's own bound, overridePollTimeout (500 ms in all), while
	// Redis answers. The instance that set it applies it before SetLimit
	// returns.
	OverridePoll = 250 * time.Millisecond
)

// limitsVersionKey changes with every change to LimitsKey: a random value,
// so that a Redis that lost both keys and saw as many changes since cannot
// show an instance the version it last loaded. A poll reads it alone, and
// loads the hash only when it moved.
const limitsVersionKey = LimitsKey + ":version"

// overridePollTimeout bounds one poll.
const overridePollTimeout = 250 * time.Millisecond

// ErrBadLimit is wrapped by the error of an override [Policy.SetLimit]
// refuses: a limit or window the rule's algorithm cannot take (as start-up
// would refuse it), or one override more than its quota
// ([MaxRuleOverrides], [MaxIdentityOverrides]). Its text says
// what is wrong, naming the option as start-up does, and holds neither an
// identity nor a Redis error, so an admin API may show it.
var ErrBadLimit = errors.New("ginlimit: bad limit")

// setLimitScript sets (ARGV[2], "limit window_us") or clears (ARGV[2] "")
// the override ARGV[1] in the hash KEYS[1], refusing a new field past
// ARGV[3] fields of its kind ({-1}): a rule's or plan's (ARGV[5] "1",
// fields ending in " *") or an identity's. It counts them only when the
// hash holds that many fields of both kinds together, so that below the
// quota a SetLimit costs O(1); at it, one pass over the field names. It
// sets the version KEYS[2] to ARGV[4].
var setLimitScript = redis.NewScript(`
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  local max = tonumber(ARGV[3])
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= max then
    local rule, n = ARGV[5] == '1', 0
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      if (string.sub(f, -2) == ' *') == rule then n = n + 1 end
    end
    if n >= max then return {-1} end
  end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('SET', KEYS[2], ARGV[4])
return {0}`)

// versionScript returns the version KEYS[1], 0 when there is none. It is
// what every poll sends: one small call through the engine, as a decision.
var versionScript = redis.NewScript(`return {tonumber(redis.call('GET', KEYS[1]) or '0')}`)

// loadScript returns the version KEYS[2] (0 when there is none) and the
// hash KEYS[1] as HGETALL does, read together: a poll sends it when the
// version moved.
var loadScript = redis.NewScript(`return {tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('HGETALL', KEYS[1])}`)

// SetLimit overrides the limit and window of t's rule while the service
// runs, on every instance: the rule's own (t names no plan and no
// identity), a plan's (t.Plan), or one identity's (t.User, t.IP, t.Values,
// or t.Key for a policy used through [Policy.Allow], with t.Route as for
// [Policy.Peek]), which holds whatever the identity's plan. The most
// specific applies: the identity's, then its plan's (the rule's own, for a
// request in no plan), then the options. A window of 0 keeps the rule's; a
// limit of 0 clears the override.
//
// An override holds exactly where the rule's counts are, and nowhere else
// (see [LimitsKey]): a rule's or a plan's needs t.Route, the route whose
// limit it changes ("Policy.Allow" for every key given to Policy.Allow),
// and holds there alone, not on another route that has the same Key
// prefix; for a [Shared] rule it holds for the group as one, on every
// route of it, so t.Route may be empty or name any of them.
//
// The override is checked as start-up checks the rule's options (the
// limit's and window's ranges, the algorithm's bounds, such as a
// [SlidingLog]'s 100,000 units, a [TokenBucket]'s burst × window), and
// refused with an error wrapping [ErrBadLimit] that names what is wrong;
// so is one override more than its quota, [MaxRuleOverrides] for a
// rule's or a plan's, [MaxIdentityOverrides] for an identity's. A Target
// that names no rate rule of the policy, or a rule's without its route,
// wraps [ErrBadTarget].
//
// The override is stored in Redis (see [LimitsKey]). This instance applies
// it before SetLimit returns; every other one within [OverridePoll] and the
// poll's bound, 500 ms in all, from a copy it keeps in process, so a
// decision makes no more Redis calls for it. An override counts on the key
// its rule counts on, or its plan's: an identity's override on the key of
// the plan the identity is in. So a change keeps what was spent: a cut
// admits nothing until the count (a token bucket's level) is under the new
// limit, and a raise gives the difference, whatever the algorithm. A
// [SlidingCounter]'s override keeps the rule's sub-window length, so its
// window must be 1 to 1000 times that (docs/operations.md says what each
// algorithm does with a new window). [Decision.Window]
// and [Decision.Source] say which settings applied; Peek of a Target that
// names only a rule (and plan) returns them, without reading a count when
// the rule's counts need an identity or a route.
func (p *Policy) SetLimit(ctx context.Context, t Target, limit int, window time.Duration) error {
	r, field, src, err := p.overrideOf(t)
	if err != nil {
		return err
	}
	value := ""
	if limit != 0 {
		if _, err := p.compileOverride(r, limit, window, src); err != nil {
			return fmt.Errorf("ginlimit: SetLimit: rule %q: %w", r.Name, err)
		}
		value = strconv.Itoa(limit) + " " + strconv.FormatInt(window.Microseconds(), 10)
	}
	var version [8]byte
	_, _ = rand.Read(version[:]) // never fails (crypto/rand)
	// 1 to 2^53-1: exact in the scripts' numbers, never the 0 of no version.
	quota, kind, ruleKind := MaxIdentityOverrides, "MaxIdentityOverrides", "0"
	if src != SourceIdentityOverride {
		quota, kind, ruleKind = MaxRuleOverrides, "MaxRuleOverrides", "1"
	}
	args := []any{field, value, quota, strconv.FormatUint(binary.BigEndian.Uint64(version[:])>>11|1, 10), ruleKind}
	reply, _, err := p.engine.Run(ctx, p.queue, p.timeout, setLimitScript, []string{LimitsKey, limitsVersionKey}, args)
	if err != nil {
		return fmt.Errorf("ginlimit: SetLimit: rule %q: %w", r.Name, err)
	}
	if len(reply) == 1 && reply[0] < 0 {
		return fmt.Errorf("ginlimit: SetLimit: rule %q: %w: %s (%d) overrides of its kind are set already; clear one first", r.Name, ErrBadLimit, kind, quota)
	}
	if err := p.live.refresh(ctx, overridePollTimeout); err != nil {
		// Stored: this instance applies it with its next poll.
		p.logs.log(ctx, p.logger, slog.LevelWarn, "ginlimit: override stored, not yet applied here", slog.String("rule", r.Name), errAttr(err))
	}
	p.log().LogAttrs(ctx, slog.LevelInfo, "ginlimit: limit override set (a limit of 0 clears it)",
		slog.String("rule", r.Name), slog.String("of", overrideNames[src]), slog.Int("limit", limit), slog.Duration("window", window))
	return nil
}

// overrideNames names, in the log, what an override of each Source is of; the
// identity itself is never logged.
var overrideNames = [...]string{SourceOverride: "rule", SourcePlanOverride: "plan", SourceIdentityOverride: "identity"}

// overrideOf resolves t to the rule an override of it is compiled from
// (the rule, or the plan's), its field in LimitsKey and its Source.
func (p *Policy) overrideOf(t Target) (*rule.Rate, string, uint8, error) {
	if t.Key == "" && t.User == "" && !t.IP.IsValid() && len(t.Values) == 0 {
		r, s, err := p.ruleTarget(t)
		if err != nil {
			return nil, "", 0, err
		}
		field := overrideScope(r, p.named, s).field()
		if t.Plan != "" {
			return r, field, SourcePlanOverride, nil
		}
		return r, field, SourceOverride, nil
	}
	if t.Plan != "" {
		return nil, "", 0, badTarget("an identity's override holds whatever its plan: leave Target.Plan empty")
	}
	a, err := p.aim(t)
	if err != nil {
		return nil, "", 0, err
	}
	r, ok := a.declared.(*rule.Rate)
	if !ok {
		return nil, "", 0, badTarget("rule %q is an in-flight rule: only a rate rule's limit can be overridden", a.declared.Core().Name)
	}
	key := rule.BuildKey(&r.Base, p.named, a.scope, &a.who)
	return r, r.Cfg.Prefix + key[len(r.Prefix):], SourceIdentityOverride, nil
}

// targetRate is the rate rule, or plan, that t names without an identity;
// its source is the Source of an override of it.
func (p *Policy) targetRate(t Target) (*rule.Rate, error) {
	x, err := p.targetRule(t)
	if err != nil {
		return nil, err
	}
	r, ok := x.(*rule.Rate)
	if !ok {
		return nil, badTarget("rule %q is an in-flight rule: only a rate rule's limit can be overridden", x.Core().Name)
	}
	if t.Plan == "" {
		return r, nil
	}
	if pr := r.Plans[t.Plan]; pr != nil {
		return pr, nil
	}
	return nil, badTarget("rule %q has no plan %q", r.Name, t.Plan)
}

// ruleTarget is the rate rule, or plan, that t names without an
// identity, and the scope its override holds in (overrideScope): t.Route,
// any route of a Shared rule's group, or Policy.Allow's calls (scope{}).
func (p *Policy) ruleTarget(t Target) (*rule.Rate, rule.Scope, error) {
	r, err := p.targetRate(t)
	switch {
	case err != nil:
		return nil, rule.Scope{}, err
	case t.Route == allowRoute:
		return r, rule.Scope{}, nil
	case t.Route == "" && r.Shared:
		return r, rule.Scope{Method: rule.UnmatchedMethod, Route: rule.SharedRoute}, nil
	case t.Route == "":
		return nil, rule.Scope{}, badTarget("rule %q counts per route: give Target.Route, the route whose limit to change (%q for every key of Policy.Allow)", r.Name, allowRoute)
	}
	s, err := targetScope(t)
	if err != nil {
		return nil, rule.Scope{}, err
	}
	return r, s, nil
}

// compileOverride compiles r with limit and window (0: r's) instead of its
// own, as start-up compiles a rule, into the rule an override of source
// src applies. It keeps r's Ban, so that strikes and bans go on.
func (p *Policy) compileOverride(r *rule.Rate, limit int, window time.Duration, src uint8) (*rule.Rate, error) {
	rc := r.Cfg
	rc.PlanPick, rc.Plans, rc.Limit = nil, nil, limit
	err := rule.CheckLimit(limit)
	if err == nil && window != 0 {
		err = rule.OverrideWindow(&rc, window)
	}
	var o *rule.Rate
	if err == nil {
		o, err = rule.CompileRate(rc, p.route.forRules(), p.named, true)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadLimit, err)
	}
	o.Ban, o.Source = r.Ban, src
	return o, nil
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
	p  *Policy
	ov *overrides

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
	source uint8
}

// resolve returns the rule that decides a call of r on key, in scope s:
// the identity's override, or r's, or r itself. Every one counts on key,
// r's (the one of the plan the identity is in), so that a change keeps
// what was spent there: an override changes no key tag (keyTag; a
// SlidingCounter's override keeps the sub-window length, overrideWindow).
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
	if set, ok := v.ov.who[whoKey{prefix: declared.Cfg.Prefix, rest: key[len(r.Prefix):]}]; ok {
		if o := v.compiled(declared, set, SourceIdentityOverride); o != nil {
			return o
		}
	}
	return v.ruleOverride(r, named, s)
}

// ruleOverride returns the rule of x's own override (a rule's or a
// plan's) for scope s, or nil.
func (v *liveView) ruleOverride(x *rule.Rate, named bool, s rule.Scope) *rule.Rate {
	set, ok := v.ov.rules[overrideScope(x, named, s)]
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
func (v *liveView) compiled(from *rule.Rate, set setting, src uint8) *rule.Rate {
	k := overrideKey{from: from, limit: set.limit, window: set.window, source: src}
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
		o, err = v.p.compileOverride(from, set.limit, set.window, src)
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
		v.p.hub.Track(o.Deny, o.Local)
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

// apply gives p the view of the overrides ov. The deny caches of its rules
// forget what they learned, which may have been under other settings. It
// costs O(p's rules): the overrides are the backend's, parsed once.
func (p *Policy) apply(ov *overrides) {
	old := p.view.Load()
	var v *liveView
	if ov.concerns(p) {
		v = &liveView{p: p, ov: ov, rules: map[overrideKey]*rule.Rate{}, prev: old}
	}
	if v == nil && old == nil {
		return
	}
	if old != nil {
		old.mu.Lock()
		old.prev = nil // one view back at most
		old.mu.Unlock()
	}
	p.view.Store(v)
	for _, r := range p.rules {
		for _, x := range withPlans(r) {
			if x.Deny != nil {
				x.Deny.Clear()
			}
		}
	}
}

// withPlans is r and its plans' rules.
func withPlans(r *rule.Rate) []*rule.Rate {
	return append([]*rule.Rate{r}, slices.Collect(maps.Values(r.Plans))...)
}

// settings is the Decision of Peek for a Target that names a rule (and
// plan) only: the limit and window in force, and their source.
func (p *Policy) settings(t Target) (Decision, error) {
	x, err := p.targetRule(t)
	if err != nil {
		return Decision{}, err
	}
	if _, ok := x.(*rule.InFlight); ok {
		b := x.Core()
		return Decision{Rule: b.Name, Limit: b.Limit}, nil
	}
	r, s, err := p.ruleTarget(t)
	if err != nil {
		return Decision{}, err
	}
	if v := p.view.Load(); v != nil {
		if o := v.ruleOverride(r, p.named, s); o != nil {
			r = o
		}
	}
	return Decision{Rule: r.Name, Limit: r.Limit, Window: r.Window, Source: r.Source}, nil
}

// liveLimits follows the overrides in Redis for the policies of one
// backend: a goroutine polls, and applies a change to every policy.
type liveLimits struct {
	engine *engine.Engine // its side calls (Engine.Side) are bounded whatever the client
	poll   sync.Mutex     // one poll at a time

	mu       sync.Mutex
	version  int64      // of the overrides loaded; -1 before the first
	ov       *overrides // LimitsKey, as loaded; nil before the first load
	policies []weak.Pointer[Policy]
	polls    atomic.Int64 // polls Redis answered, for tests
	compiles atomic.Int64 // overrides compiled for the policies, for tests
	last     atomic.Int64 // when the last poll began (Unix ns), for due

	// stop ends the background poll, and a poll under way; done is closed
	// when the poll has ended. Both nil without a background poll.
	stop context.CancelFunc
	done chan struct{}
}

// startLive starts following the overrides on e's Redis. load says
// whether Redis answered: then the overrides are loaded before it returns,
// so that a new Limiter's first decisions see them. background says
// whether a goroutine polls, until close: a Limiter from New does; the one
// a package-level RateLimit makes for itself has nothing to close it, so
// its requests poll instead (due).
func startLive(e *engine.Engine, load, background bool) *liveLimits {
	lv := &liveLimits{engine: e, version: -1}
	lv.last.Store(time.Now().UnixNano())
	if load {
		_ = lv.refresh(context.Background(), overridePollTimeout) // tried again later
	}
	if background {
		ctx, stop := context.WithCancel(context.Background())
		lv.stop, lv.done = stop, make(chan struct{})
		go lv.run(ctx)
	}
	return lv
}

// due polls, on a limiter without a background poll, when the last poll
// is OverridePoll old: the one request that finds it so starts the poll,
// on a goroutine of its own bounded by overridePollTimeout, and goes on at
// once, as the others do. No request waits for it: a decision's budget is
// its one round trip to Redis, and the poll is not part of it. The poll
// does not end with the request (the request's values are kept, not its
// cancellation), so a client that hangs up cannot cut it short.
func (lv *liveLimits) due(ctx context.Context) {
	if lv.done != nil {
		return
	}
	now, last := time.Now().UnixNano(), lv.last.Load()
	if now-last >= int64(OverridePoll) && lv.last.CompareAndSwap(last, now) {
		go func() { _ = lv.refresh(context.WithoutCancel(ctx), overridePollTimeout) }()
	}
}

// run polls every OverridePoll until close, or until the client is
// closed.
func (lv *liveLimits) run(ctx context.Context) {
	defer close(lv.done)
	tick := time.NewTicker(OverridePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := lv.refresh(ctx, overridePollTimeout); errors.Is(err, redis.ErrClosed) {
			return
		}
	}
}

// close stops the background poll, and a poll under way, and waits for
// it; safe to call more than once.
func (lv *liveLimits) close() {
	if lv.done == nil {
		return
	}
	lv.stop()
	<-lv.done
}

// refresh asks Redis for the overrides' version and, when it moved, loads
// them, both within timeout, and applies them to every policy followed.
func (lv *liveLimits) refresh(ctx context.Context, timeout time.Duration) error {
	lv.poll.Lock()
	defer lv.poll.Unlock()
	lv.mu.Lock()
	seen := lv.version
	lv.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout) // both calls together
	defer cancel()
	reply, err := lv.engine.RunAside(ctx, timeout, versionScript, []string{limitsVersionKey}, nil)
	if err != nil {
		return err
	}
	lv.polls.Add(1)
	if len(reply) != 1 {
		return fmt.Errorf("unexpected overrides version of %d elements", len(reply))
	}
	if reply[0] == seen {
		return nil
	}
	version, ov := int64(0), newOverrides(nil)
	if reply[0] != 0 { // 0: no override was ever set, or the keys were deleted
		v, err := lv.engine.Side(ctx, timeout, loadScript, []string{LimitsKey, limitsVersionKey})
		if err != nil {
			return err
		}
		var fields []string
		if version, fields, err = parseLoad(v); err != nil {
			return err
		}
		ov = newOverrides(fields)
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.version, lv.ov = version, ov
	live := lv.policies[:0]
	for _, wp := range lv.policies {
		if p := wp.Value(); p != nil {
			p.apply(ov)
			live = append(live, wp)
		}
	}
	clear(lv.policies[len(live):])
	lv.policies = live
	return nil
}

// parseLoad checks and converts loadScript's reply: the version and
// LimitsKey's fields and values, in turn (newOverrides keeps at most its
// quotas of them).
func parseLoad(v any) (int64, []string, error) {
	reply, ok := v.([]any)
	if !ok || len(reply) != 2 {
		return 0, nil, fmt.Errorf("unexpected overrides reply %T", v)
	}
	version, ok := reply[0].(int64)
	fields, ok2 := reply[1].([]any)
	if !ok || !ok2 || len(fields)%2 != 0 {
		return 0, nil, errors.New("unexpected overrides reply")
	}
	out := make([]string, 0, len(fields))
	for i := 0; i+1 < len(fields); i += 2 {
		f, ok1 := fields[i].(string)
		v, ok2 := fields[i+1].(string)
		if ok1 && ok2 {
			out = append(out, f, v)
		}
	}
	return version, out, nil
}

// follow applies the overrides to p from now on, those loaded at once.
func (lv *liveLimits) follow(p *Policy) {
	p.live = lv
	if len(p.rules) == 0 {
		return
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.policies = append(lv.policies, weak.Make(p))
	if lv.ov != nil {
		p.apply(lv.ov)
	}
}
