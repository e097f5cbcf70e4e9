package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"

	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
)

// Policy is one compiled route: its rules (one, or several declared with
// [Rule]), what it does with their decision, and the Redis backend it asks.
// [RateLimit] compiles one per route and limiter; make one with
// [Limiter.Policy] to take decisions without gin.
//
// A Policy is safe for concurrent use. Its rules are fixed when it is
// compiled; overrides ([Policy.SetLimit]) take their place through a view
// that is swapped whole, never changed in place.
type Policy struct {
	all          []rule.Any               // every rule, in the order declared
	rules        []*rule.Rate             // the rate rules, decided by one script call
	slots        []*rule.InFlight         // the in-flight rules (inflight.go)
	records      int                      // the records of the rate rules' script call: one per rule, one per Ban (see place)
	bans         bool                     // some rate rule has a Ban
	named        bool                     // declared with Rule: keys and 429 bodies name the rule
	planned      bool                     // some rule has plans (LimitBy): the policy header is per request
	partitioned  bool                     // some rule hashes its identity: the policy header has pk, per request
	engine       *engine.Engine           // makes the route's Redis calls
	fleet        *fleet.Fleet             // keeps it in step with the other instances: resets, overrides
	hub          *fleet.Hub               // keeps its caches coherent; nil without a subscription
	live         *liveLimits              // follows the overrides in Redis (overrides.go)
	view         atomic.Pointer[liveView] // the overrides that apply to the policy; nil for none
	route        routeConfig              // what an override's rule is compiled with
	policyHeader string                   // RateLimit-Policy: every rule's, joined
	seen         seenRoutes               // the routes it has served (registry.go)

	timeout   time.Duration
	queue     time.Duration // QueueTimeout
	staleness time.Duration // MaxStaleness
	onFail    FailPolicy
	shadow    bool
	headers   HeaderStyle
	respond   func(*gin.Context, Decision)
	observers []func(context.Context, Event)
	logger    *slog.Logger
	logs      *logThrottle // warnings and errors, shared by the limiter's routes
	debugLogs logThrottle  // refusals at debug level, per route
	authLogs  sync.Map     // identity failures at debug level, per route: reason -> *logThrottle
	secret    []byte       // keys the identity tags of log lines

	clock      func() int64     // tests only: the scripts' clock in µs
	localClock func() time.Time // tests only: the FailLocal fallback's clock; nil is time.Now
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
	p := l.newPolicy(&rc, len(c.rules) > 0)
	if !p.named {
		r, err := rule.Compile(c.rule, rc.forRules(), false)
		if err != nil {
			return nil, err
		}
		p.add(r)
	}
	if err := p.compileNamed(c, &rc); err != nil {
		return nil, err
	}
	if err := p.checkShared(); err != nil {
		return nil, err
	}
	b, err := l.backendFor(rc)
	if err != nil {
		return nil, err
	}
	p.engine, p.fleet, p.hub, p.route = b.engine, b.fleet, b.fleet.Hub(), rc
	p.register()
	p.policyHeader = p.joinPolicies()
	b.live.follow(p)
	return p, nil
}

// newPolicy is the route's policy before its rules are compiled: the
// route-wide settings copied from rc and the limiter.
func (l *Limiter) newPolicy(rc *routeConfig, named bool) *Policy {
	return &Policy{
		named:     named,
		timeout:   rc.timeout,
		queue:     rc.queueTimeout,
		staleness: rc.staleness,
		onFail:    rc.onFail,
		shadow:    rc.shadow,
		headers:   rc.headers,
		respond:   rc.respond,
		observers: rc.observers,
		logger:    rc.logger,
		logs:      l.logs,
		secret:    l.secret,
	}
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
		p.add(r)
	}
	return nil
}

// add appends the compiled rule r to p's rules of its kind, and notes
// what a request on it needs: a ban's call, a plan's policy header.
func (p *Policy) add(r rule.Any) {
	p.all = append(p.all, r)
	p.partitioned = p.partitioned || r.Core().HashKey != nil && len(r.Core().Dims) > 0
	switch r := r.(type) {
	case *rule.InFlight:
		p.slots = append(p.slots, r)
	case *rule.Rate:
		p.rules = append(p.rules, r)
		p.records += r.Records()
		p.bans = p.bans || r.Ban != nil
		p.planned = p.planned || r.Plans != nil
	}
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

// register prepares the scripts of p's rate rules and their plans on p's
// engine, and has p's hub track their deny caches and local fallbacks,
// their bans' too.
func (p *Policy) register() {
	for _, r := range p.rules {
		for _, x := range append([]*rule.Rate{r}, slices.Collect(maps.Values(r.Plans))...) {
			if x.Script != nil {
				p.engine.Prepare(x.Script)
			}
			p.hub.Track(x.Deny, x.Local)
			if x.Ban != nil {
				p.hub.Track(x.Ban.Deny, x.Ban.Local)
			}
		}
	}
}

// joinPolicies is the RateLimit-Policy header of every rule, in the order
// declared.
func (p *Policy) joinPolicies() string {
	items := make([]string, len(p.all))
	for i, r := range p.all {
		items[i] = r.Core().PolicyHeader
	}
	return strings.Join(items, ", ")
}

// names returns the names of the policy's rules, as in the
// RateLimit-Policy header, joined by commas.
func (p *Policy) names() string {
	names := make([]string, len(p.all))
	for i, r := range p.all {
		names[i] = r.Core().Name
	}
	return strings.Join(names, ",")
}
