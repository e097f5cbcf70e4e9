package ginlimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/lua"
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
	all          []anyRule                // every rule, in the order declared
	rules        []*rateRule              // the rate rules, decided by one script call
	slots        []*slotRule              // the in-flight rules (inflight.go)
	records      int                      // the records of the rate rules' script call: one per rule, one per Ban (see place)
	bans         bool                     // some rate rule has a Ban
	named        bool                     // declared with Rule: keys and 429 bodies name the rule
	tiered       bool                     // some rule has plans (LimitBy): the policy header is per request
	partitioned  bool                     // some rule hashes its identity: the policy header has pk, per request
	engine       *engine.Engine           // makes the route's Redis calls
	fleet        *fleet.Fleet             // keeps it in step with the other instances: resets, overrides
	hub          *fleet.Hub               // keeps its caches coherent; nil without a subscription
	live         *liveLimits              // follows the overrides in Redis (overrides.go)
	view         atomic.Pointer[liveView] // the overrides that apply to the policy; nil for none
	route        routeConfig              // what an override's rule is compiled with
	policyHeader string                   // RateLimit-Policy: every rule's, joined

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

// ruleBase is what every kind of rule has: its name, how its keys are
// built (prefix, dimensions, identity), and what its answers say (the
// headers' texts, the 429 body). A decision points at the ruleBase of the
// rule that decided it (Decision.decider).
type ruleBase struct {
	name        string
	escapedName string // as it appears in keys
	prefix      string
	limit       int           // its decisions' Limit: a rate rule's limit, its Ban's too, or an in-flight rule's n
	window      time.Duration // its decisions' Window: a rate rule's; 0 for an in-flight rule
	source      uint8         // its decisions' Source: SourceConfig, or the kind of override it is
	dims        []dim         // what it counts per; none for the whole route
	ips         *identity.IP
	users       identity.User
	hashKey     []byte
	anonByIP    bool
	shared      bool   // Shared: its keys' scope is sharedRoute's
	group       string // Shared: its group and the settings the group's
	groupTerms  string // routes must agree on (groupOf)

	message      string // its 429's message, for Decision.Message
	quotedName   string
	limitText    string
	policyHeader string // this rule's RateLimit-Policy item
	body429      []byte
}

// base returns r: a rule of any kind has one (anyRule).
func (r *ruleBase) base() *ruleBase { return r }

// anyRule is a rule a route declares: a *rateRule or a *slotRule.
type anyRule interface{ base() *ruleBase }

// rateRule is one count in a window: limit units per window under an
// algorithm, decided with the route's other rate rules in one script call.
type rateRule struct {
	ruleBase
	window   time.Duration
	alg      AlgorithmKind
	maxCost  int // the most one request can ever be admitted with
	cost     int // 1, the cost of a request without a Cost function: that of args
	costFunc func(*gin.Context) int
	pick     func(*gin.Context) string // the request's plan
	plans    map[string]*rateRule      // by plan name; nil without LimitBy
	of       *rateRule                 // a plan's rule: the rule it is a plan of; nil for another
	ban      *banRule                  // its Ban (ban.go), or nil
	deny     *state.DenyCache          // nil when off
	local    *state.Buckets            // the FailLocal fallback, or nil

	cfg      ruleConfig    // the settings it was compiled from, which an override changes (overrides.go)
	script   *redis.Script // the single-rule script, with this rule's settings written in; nil for an override
	args     []any         // that script's arguments at the fixed cost: the clock (""), the cost
	settings []any         // this rule's arguments of the several-rule script, but the cost (ruleArgs)
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
		r, err := compileRule(c.rule, &rc, false)
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
		var r anyRule
		if err == nil {
			r, err = compileRule(rcfg, rc, true)
		}
		if err != nil {
			return fmt.Errorf("Rule %d (%q): %w", i+1, rcfg.name, err)
		}
		names[r.base().name] = true
		p.add(r)
	}
	return nil
}

// add appends the compiled rule r to p's rules of its kind, and notes
// what a request on it needs: a ban's call, a plan's policy header.
func (p *Policy) add(r anyRule) {
	p.all = append(p.all, r)
	p.partitioned = p.partitioned || r.base().hashKey != nil && len(r.base().dims) > 0
	switch r := r.(type) {
	case *slotRule:
		p.slots = append(p.slots, r)
	case *rateRule:
		p.rules = append(p.rules, r)
		p.records += r.records()
		p.bans = p.bans || r.ban != nil
		p.tiered = p.tiered || r.plans != nil
	}
}

// namedRuleConfig applies one Rule's options g over the route's rule
// settings base, and checks that the rule has a name not in names. It
// returns the settings even with an error, for the error to name the rule.
func namedRuleConfig(base ruleConfig, g ruleGroup, names map[string]bool) (ruleConfig, error) {
	rcfg := base
	rcfg.name = ""
	var errs []error
	for _, o := range g {
		if err := o.applyRule(&rcfg); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	switch {
	case err != nil:
	case rcfg.name == "":
		err = errors.New("give each rule of a route a Name")
	case names[rcfg.name]:
		err = fmt.Errorf("the name %q is used twice", rcfg.name)
	}
	return rcfg, err
}

// register prepares the scripts of p's rate rules and their plans on p's
// engine, and has p's hub track their deny caches and local fallbacks,
// their bans' too.
func (p *Policy) register() {
	for _, r := range p.rules {
		for _, x := range append([]*rateRule{r}, slices.Collect(maps.Values(r.plans))...) {
			if x.script != nil {
				p.engine.Prepare(x.script)
			}
			p.hub.Track(x.deny, x.local)
			if x.ban != nil {
				p.hub.Track(x.ban.deny, x.ban.local)
			}
		}
	}
}

// joinPolicies is the RateLimit-Policy header of every rule, in the order
// declared.
func (p *Policy) joinPolicies() string {
	items := make([]string, len(p.all))
	for i, r := range p.all {
		items[i] = r.base().policyHeader
	}
	return strings.Join(items, ", ")
}

// compileRule compiles one rule of a route, of the kind its options make
// it. named says whether the route declares its rules with Rule, whose 429
// bodies name the rule.
func compileRule(rc ruleConfig, route *routeConfig, named bool) (anyRule, error) {
	if slices.ContainsFunc(rc.dims, func(d dim) bool { return d.kind == dimUser }) && rc.users == nil {
		return nil, errors.New("Type(User), Type(UserOrIP) or a User dimension needs ginlimit.UserIdentity(...), for example identity.NewJWT(identity.HMACSecret(secret))")
	}
	if rc.ips == nil {
		rc.ips = &identity.IP{}
	}
	// Each kind's constructor returns its own pointer type: turned into an
	// anyRule only when it is not nil.
	if rc.slots > 0 {
		r, err := compileSlots(rc, route, named)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	r, err := compileRate(rc, route, named)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// compileRate compiles a rate rule, its Ban and its plans.
func compileRate(rc ruleConfig, route *routeConfig, named bool) (*rateRule, error) {
	maxCost, err := rc.checkRate()
	if err != nil {
		return nil, err
	}
	base, err := rc.base(rc.prefix+rc.alg.keyTag(&rc), rc.limit, named)
	if err != nil {
		return nil, err
	}
	param := rc.alg.param(&rc)
	base.window = rc.window
	r := &rateRule{
		ruleBase: base,
		window:   rc.window,
		alg:      rc.alg,
		maxCost:  maxCost,
		cost:     rc.cost,
		costFunc: rc.costFunc,
		deny:     newDenyCache(route, rc.ban != nil),
		local:    newLocal(route, rc.limit, rc.window),
		cfg:      rc,
		args:     singleArgs("", rc.cost),
		settings: ruleArgs(rc.alg, rc.window, rc.limit, param),
	}
	if !rc.override {
		// An override goes through the several-rule script, whose settings
		// are arguments: no value an operator sets loads a script in Redis.
		r.script = redis.NewScript(lua.Single(string(rc.alg), rc.window.Microseconds(), int64(rc.limit), int64(param)))
	}
	r.policyHeader = r.quotedName + ";q=" + r.limitText + ";w=" + strconv.FormatInt(ceilSeconds(rc.window), 10)
	r.group, r.groupTerms = rc.groupOf("rate")
	if err := r.compileExtras(rc, route, named); err != nil {
		return nil, err
	}
	return r, nil
}

// base is the part of a rule of these settings that every kind has, its
// keys under prefix and its decisions' Limit limit. Its policyHeader is
// the kind's to write.
func (rc *ruleConfig) base(prefix string, limit int, named bool) (ruleBase, error) {
	name := rc.ruleName()
	body429, err := body429(rc.message, name, named)
	if err != nil {
		return ruleBase{}, err
	}
	return ruleBase{
		name:        name,
		escapedName: escape(name, idSafe),
		prefix:      prefix,
		limit:       limit,
		dims:        rc.dims,
		ips:         rc.ips,
		users:       rc.users,
		hashKey:     rc.hashKey,
		anonByIP:    rc.anonByIP,
		shared:      rc.shared,
		message:     rc.message,
		quotedName:  sfString(name),
		limitText:   strconv.Itoa(limit),
		body429:     body429,
	}, nil
}

// checkRate checks a rate rule's algorithm settings, and
// returns the most one request can ever be admitted with.
func (rc *ruleConfig) checkRate() (int, error) {
	if err := rc.alg.validate(rc); err != nil {
		return 0, err
	}
	maxCost := rc.alg.maxCost(rc)
	return maxCost, nil
}

// compileExtras compiles what a rate rule may add to its limit: its Ban
// and its plans.
func (r *rateRule) compileExtras(rc ruleConfig, route *routeConfig, named bool) error {
	if rc.ban != nil {
		if err := r.compileBan(rc, route, named); err != nil {
			return err
		}
	}
	if rc.plans != nil {
		if err := r.compilePlans(rc, route, named); err != nil {
			return err
		}
	}
	return nil
}

// ruleName is the rule's name: its [Name], or one derived from its key
// prefix.
func (rc *ruleConfig) ruleName() string {
	if rc.name == "" {
		return defaultName(rc.prefix)
	}
	return rc.name
}

// body429 is the 429 body of rule name, saying message; named says
// whether it names the rule.
func body429(message, name string, named bool) ([]byte, error) {
	body := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Rule    string `json:"rule,omitempty"`
	}{Code: 429, Message: message}
	if named {
		body.Rule = name
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("Message(%q): %w", message, err)
	}
	return b, nil
}

// names returns the names of the policy's rules, as in the
// RateLimit-Policy header, joined by commas.
func (p *Policy) names() string {
	names := make([]string, len(p.all))
	for i, r := range p.all {
		names[i] = r.base().name
	}
	return strings.Join(names, ",")
}

// sfString quotes s as an RFC 8941 structured-field string.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}
