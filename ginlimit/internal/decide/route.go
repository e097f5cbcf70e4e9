package decide

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/gin-gonic/gin"
	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// Route decides the requests of one compiled route: its rules (one, or
// several declared with Rule), what it does with their decision, and the
// Redis backend it asks. ginlimit's Policy is a façade over one.
//
// A Route is safe for concurrent use. Its rules are fixed when it is
// compiled; overrides take their place through a view that is swapped
// whole, never changed in place.
type Route struct {
	All    []rule.Any       // every rule, in the order declared
	Rules  []*rule.Rate     // the rate rules, decided by one script call
	Slots  []*rule.InFlight // the in-flight rules (slots.go)
	Named  bool             // declared with Rule: keys and 429 bodies name the rule
	Engine *engine.Engine   // makes the route's Redis calls
	Fleet  *fleet.Fleet     // keeps it in step with the other instances: resets, overrides
	Hub    *fleet.Hub       // keeps its caches coherent; nil without a subscription
	Config
	Seen Seen // the routes it has served

	records      int                      // the records of the rate rules' script call: one per rule, one per Ban (see place)
	bans         bool                     // some rate rule has a Ban
	planned      bool                     // some rule has plans (LimitBy): the policy header is per request
	partitioned  bool                     // some rule hashes its identity: the policy header has pk, per request
	live         *Live                    // follows the overrides in Redis (Follow)
	view         atomic.Pointer[liveView] // the overrides that apply to the route; nil for none
	policyHeader string                   // RateLimit-Policy: every rule's, joined
	debugLogs    LogThrottle              // refusals at debug level, per route
	authLogs     sync.Map                 // identity failures at debug level, per route: reason -> *LogThrottle
}

// Config is what concerns the whole request, as the route options set it.
type Config struct {
	Timeout   time.Duration
	Queue     time.Duration // QueueTimeout
	Staleness time.Duration // MaxStaleness
	BreakOpen time.Duration // the breaker's open time: a 503's Retry-After
	OnFail    FailPolicy
	Shadow    bool
	Headers   HeaderStyle
	Respond   func(*gin.Context, Decision)
	Observers []func(context.Context, Event)
	Logger    *slog.Logger
	Logs      *LogThrottle // warnings and errors, shared by the limiter's routes
	Secret    []byte       // keys the identity tags of log lines
	RuleRoute rule.Route   // what a rule of the route, an override's too, is compiled with

	Clock      func() int64     // tests only: the scripts' clock in µs
	LocalClock func() time.Time // tests only: the FailLocal fallback's clock; nil is time.Now
}

// Ready prepares the scripts of the route's rate rules on its engine, has
// its hub track their in-process state, and precomputes its policy header,
// once its rules are added and its backend set.
func (p *Route) Ready(live *Live) {
	p.register()
	p.policyHeader = p.joinPolicies()
	live.Follow(p)
}

// Live is the overrides as the policies of one Limiter on one Redis
// client see them: its fleet loads LimitsKey when it changes (apply), and
// each policy that follows gets a new view.
type Live struct {
	mu       sync.Mutex
	ov       *fleet.Overrides // LimitsKey, as loaded; nil before the first load
	policies []weak.Pointer[Route]
	compiles atomic.Int64 // overrides compiled for the policies, for tests
}

// Apply applies the overrides, as the fleet loaded and parsed them, to
// every policy followed (the fleet's OnLimits).
func (lv *Live) Apply(ov *fleet.Overrides) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.ov = ov
	live := lv.policies[:0]
	for _, wp := range lv.policies {
		if p := wp.Value(); p != nil {
			p.apply(ov)
			live = append(live, wp)
		}
	}
	clear(lv.policies[len(live):])
	lv.policies = live
}

// Follow applies the overrides to p from now on, those loaded at once.
func (lv *Live) Follow(p *Route) {
	p.live = lv
	if len(p.Rules) == 0 {
		return
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.policies = append(lv.policies, weak.Make(p))
	if lv.ov != nil {
		p.apply(lv.ov)
	}
}

// apply gives p the view of the overrides ov. The deny caches of its rules
// forget what they learned, which may have been under other settings. It
// costs O(p's rules): the overrides are the backend's, parsed once.
func (p *Route) apply(ov *fleet.Overrides) {
	old := p.view.Load()
	var v *liveView
	if p.concerns(ov) {
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
	for _, r := range p.Rules {
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

// The fields of LimitsKey, and the values an operator may edit by hand:
// the fleet of each Limiter and client parses them once per change
// (fleet.NewOverrides) into the index all of its policies share; a field
// or value that does not parse is left out, as one whose rule does not
// compile is. This file writes the fields, as the keys are written.
//
// A rule's or a plan's field names the count's scope as the count's key
// does, so that an override holds exactly where the configured rule
// counts, and on no other route that shares its Key prefix:
//
//	<prefix>{<METHOD> <route>}[ rule:<name>] *   the rule on one gin route
//	<prefix>{* unmatched}[ rule:<name>] *        on the requests that matched no route
//	<prefix>{* shared} rule:<name> *             a Shared group, on every route of it
//	<prefix>{* allow}[ rule:<name>] *            every key given to Policy.Allow
//
// The prefix is the rule's Key (a plan's with its "tier=<plan>:"), the
// scope is escaped as in a key, and " rule:<name>" is there when the
// count's key carries the rule's name. No count key ends in " *": an
// identity's values and a rule's name are escaped, spaces included. No
// gin route spells "* allow" (a route begins with '/'), and no Allow key
// holds a space. An identity's field is its count's key past the
// algorithm's tag (see SetLimit).

// RuleField is k's field in LimitsKey.
func RuleField(k fleet.RuleScope) string {
	f := k.Prefix + "{" + rule.Escape(k.Method, rule.RouteSafe) + " " + rule.Escape(k.Route, rule.RouteSafe) + "}"
	if k.Name != "" {
		f += " rule:" + k.Name
	}
	return f + " *"
}

// IsField reports whether f is the field ruleField writes for k, its name
// escaped as in a key (a fleet.Canonical): no key of a rule names another.
func IsField(k fleet.RuleScope, f string) bool {
	return rule.Escape(k.Name, rule.IDSafe) == k.Name && RuleField(k) == f
}

// concerns reports whether some override of ov is under a Key prefix of
// p's rate rules or their plans: a policy none concerns has no view.
func (p *Route) concerns(ov *fleet.Overrides) bool {
	for _, r := range p.Rules {
		for _, x := range withPlans(r) {
			if ov.Prefixes[x.Cfg.Prefix] {
				return true
			}
		}
	}
	return false
}

// Add appends the compiled rule r to p's rules of its kind, and notes
// what a request on it needs: a ban's call, a plan's policy header.
func (p *Route) Add(r rule.Any) {
	p.All = append(p.All, r)
	p.partitioned = p.partitioned || r.Core().HashKey != nil && len(r.Core().Dims) > 0
	switch r := r.(type) {
	case *rule.InFlight:
		p.Slots = append(p.Slots, r)
	case *rule.Rate:
		p.Rules = append(p.Rules, r)
		p.records += r.Records()
		p.bans = p.bans || r.Ban != nil
		p.planned = p.planned || r.Plans != nil
	}
}

// register prepares the scripts of p's rate rules and their plans on p's
// engine, and has p's hub track their deny caches and local fallbacks,
// their bans' too.
func (p *Route) register() {
	for _, r := range p.Rules {
		for _, x := range append([]*rule.Rate{r}, slices.Collect(maps.Values(r.Plans))...) {
			if x.Script != nil {
				p.Engine.Prepare(x.Script)
			}
			p.Hub.Track(x.Deny, x.Local)
			if x.Ban != nil {
				p.Hub.Track(x.Ban.Deny, x.Ban.Local)
			}
		}
	}
}

// joinPolicies is the RateLimit-Policy header of every rule, in the order
// declared.
func (p *Route) joinPolicies() string {
	items := make([]string, len(p.All))
	for i, r := range p.All {
		items[i] = r.Core().PolicyHeader
	}
	return strings.Join(items, ", ")
}

// InForce is the rule that decides r's calls (r a rule or a plan) in
// scope s for an identity without an override of its own: r's override,
// or r.
func (p *Route) InForce(r *rule.Rate, s rule.Scope) *rule.Rate {
	if v := p.view.Load(); v != nil {
		if o := v.ruleOverride(r, p.Named, s); o != nil {
			return o
		}
	}
	return r
}

// OverrideField is the field in LimitsKey of an override of x, a rule or a
// plan, that holds for calls in scope s.
func (p *Route) OverrideField(x *rule.Rate, s rule.Scope) string {
	return RuleField(overrideScope(x, p.Named, s))
}

// Peek is what a request of r's Cost on its count for scope s and
// identity w would be told now, counting nothing: ginlimit's Policy.Peek
// of a rate rule.
func (p *Route) Peek(ctx context.Context, r *rule.Rate, s rule.Scope, w *rule.Who) (Decision, error) {
	req := &request{p: p, scope: s}
	req.alloc([]*rule.Rate{r}, r.Records())
	req.setCall(0, r, w, max(r.Cost, 1))
	reply, _, err := p.runScript(ctx, peekScript, req.keys, req.severalArgs())
	if err != nil {
		return Decision{}, fmt.Errorf("ginlimit: Peek: rule %q: %w", r.Name, err)
	}
	d, _, err := req.parse(reply, false)
	if err != nil {
		return Decision{}, fmt.Errorf("ginlimit: Peek: rule %q: %w", r.Name, err)
	}
	return d, nil
}

// PeekSlots is Policy.Peek for an in-flight rule: Limit is n, Remaining
// the slots free now, and Allowed whether a request would get one.
func (p *Route) PeekSlots(ctx context.Context, r *rule.InFlight, key string) (Decision, error) {
	rules := []*rule.InFlight{r}
	reply, _, err := p.runScript(ctx, slotScript, []string{key}, slotArgs(p.Clock, rules, "peek", "peek"))
	if err == nil {
		var d Decision
		if d, err = parseSlots(rules, reply); err == nil {
			return d, nil
		}
	}
	return Decision{}, fmt.Errorf("ginlimit: Peek: rule %q: %w", r.Name, err)
}

// Log is the route's logger: its Logger option's, or slog's default.
func (p *Route) Log() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}
