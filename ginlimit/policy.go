package ginlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// Policy is one compiled route: its rules (one, or several declared with
// [Rule]), what it does with their decision, and the Redis backend it asks.
// [RateLimit] compiles one per route and limiter; make one with
// [Limiter.Policy] to take decisions without gin.
//
// A Policy is safe for concurrent use. Its rules are fixed when it is
// compiled; overrides ([Policy.SetLimit]) take their place through a view
// that is swapped whole, never changed in place. It is a façade: what
// decides a request is ginlimit/internal/decide's Route.
type Policy struct {
	route *decide.Route // decides its requests (package decide)
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
	return p.route.Allow(ctx, key, n)
}

// errNoBackend is the error of a route that reaches no Redis client.
var errNoBackend = errors.New("no Redis backend: give ginlimit.Redis(client) to ginlimit.New or to the route")

// compile checks the options that depend on each other and precomputes what
// every request would otherwise recompute.
func (l *Limiter) compile(c config) (*Policy, error) {
	rc := c.route
	if rc.client == nil {
		return nil, errNoBackend
	}
	rc.instances = l.instancesFor(&rc)
	p := &Policy{route: l.newRoute(&rc, len(c.rules) > 0)}
	if !p.route.Named {
		r, err := rule.Compile(c.rule, rc.forRules(), false)
		if err != nil {
			return nil, err
		}
		p.route.Add(r)
	}
	if err := p.compileNamed(c, &rc); err != nil {
		return nil, err
	}
	if err := rule.CheckShared(p.route.All); err != nil {
		return nil, err
	}
	b, err := l.backendFor(rc)
	if err != nil {
		return nil, err
	}
	p.route.Engine, p.route.Fleet, p.route.Hub = b.engine, b.fleet, b.fleet.Hub()
	p.route.Ready(b.live)
	return p, nil
}

// newRoute is the route's decider before its rules are compiled: the
// route-wide settings copied from rc and the limiter.
func (l *Limiter) newRoute(rc *routeConfig, named bool) *decide.Route {
	return &decide.Route{Named: named, Config: decide.Config{
		Timeout:   rc.timeout,
		Queue:     rc.queueTimeout,
		Staleness: rc.staleness,
		BreakOpen: rc.breakOpen,
		OnFail:    rc.onFail,
		Shadow:    rc.shadow,
		Headers:   rc.headers,
		Respond:   rc.respond,
		Observers: rc.observers,
		Logger:    rc.logger,
		Logs:      l.logs,
		Secret:    l.secret,
		RuleRoute: rc.forRules(),
	}}
}

// compileNamed compiles the rules the route declares with Rule, in order,
// adding them to p; an error names the rule it is about.
func (p *Policy) compileNamed(c config, rc *routeConfig) error {
	names := map[string]bool{}
	for i, g := range c.rules {
		rcfg, err := namedRuleConfig(c.rule, g, names)
		var r rule.Any
		if err == nil {
			r, err = rule.Compile(rcfg, rc.forRules(), true)
		}
		if err != nil {
			return fmt.Errorf("Rule %d (%q): %w", i+1, rcfg.Name, err)
		}
		names[r.Core().Name] = true
		p.route.Add(r)
	}
	return nil
}

// namedRuleConfig applies one Rule's options g over the route's rule
// settings base, and checks that the rule has a name not in names. It
// returns the settings even with an error, for the error to name the rule.
func namedRuleConfig(base rule.Config, g ruleGroup, names map[string]bool) (rule.Config, error) {
	rcfg := base
	rcfg.Name = ""
	var errs []error
	for _, o := range g {
		if err := o.applyRule(&rcfg); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	switch {
	case err != nil:
	case rcfg.Name == "":
		err = errors.New("give each rule of a route a Name")
	case names[rcfg.Name]:
		err = fmt.Errorf("the name %q is used twice", rcfg.Name)
	}
	return rcfg, err
}

// group is a Shared group as the first route of a Limiter to claim it
// declared it: its settings, and its rule, whose in-process state (deny
// cache, FailLocal buckets) the group's later routes on the same backend
// take, so that a key has one such state per instance, as it has one
// count in Redis: a fallback on any route of the group then continues from
// what Redis last said for the key on any other.
type group struct {
	terms  string
	rule   rule.Any
	engine *engine.Engine
}

// claimGroups records the groups of p's Shared rules in l, and refuses p
// when another route of l gave one of them other settings. p's rules of a
// group already claimed take its state.
func (l *Limiter) claimGroups(p *Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range p.route.All {
		b := r.Core()
		if b.Group == "" {
			continue
		}
		if l.groups == nil {
			l.groups = map[string]group{}
		}
		g, ok := l.groups[b.Group]
		switch {
		case !ok:
			l.groups[b.Group] = group{terms: b.GroupTerms, rule: r, engine: p.route.Engine}
		case g.terms != b.GroupTerms:
			return fmt.Errorf("rule %q: another route shares its count (the same Key and Name) with %s; this one gives %s: the routes of a group must agree, or take a Key or Name of their own",
				b.Name, g.terms, b.GroupTerms)
		case g.engine == p.route.Engine:
			rule.TakeState(r, g.rule)
		}
	}
	return nil
}
