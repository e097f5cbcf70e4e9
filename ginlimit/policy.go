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
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/lua"
)

// Policy is one compiled route: its rules (one, or several declared with
// [Rule]), what it does with their decision, and the Redis backend it asks.
// [RateLimit] compiles one per route and limiter; make one with
// [Limiter.Policy] to take decisions without gin.
//
// A Policy is immutable and safe for concurrent use.
type Policy struct {
	all          []*rule        // every rule, in the order declared
	rules        []*rule        // the rate rules, decided by one script call
	slots        []*rule        // the in-flight rules (inflight.go)
	calls        int            // calls per decision of the rate rules: one per rule, and one per rule's Ban
	named        bool           // declared with Rule: keys and 429 bodies name the rule
	tiered       bool           // some rule has plans (LimitBy): the policy header is per request
	engine       *engine.Engine // makes the route's Redis calls
	hub          *state.Hub     // keeps its caches coherent; nil without a subscription
	policyHeader string         // RateLimit-Policy: every rule's, joined

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
	secret    []byte       // keys the identity tags of log lines

	clock func() int64 // tests only: the scripts' clock in µs
}

// rule is one compiled count: what is counted, per what, and how much.
type rule struct {
	name        string
	escapedName string // as it appears in keys
	prefix      string
	window      time.Duration
	limit       int
	alg         AlgorithmKind
	maxCost     int // the most one request can ever be admitted with
	cost        int // 1, the cost of a request without a Cost function: that of args
	costFunc    func(*gin.Context) int
	dims        []dim // what it counts per; none for the whole route
	ips         *identity.IP
	users       identity.User
	hashKey     []byte
	anonByIP    bool
	pick        func(*gin.Context) string // the request's plan
	plans       map[string]*rule          // by plan name; nil without LimitBy
	ban         *rule                     // the penalty deciding this rule's bans (ban.go), or nil
	penalty     bool                      // this is a penalty, some rule's ban
	deny        *state.DenyCache          // nil when off
	local       *state.Buckets            // the FailLocal fallback, or nil
	slots       int                       // an in-flight rule's n (InFlight); 0 for a rate rule
	lease       time.Duration             // an in-flight rule's lease
	sem         *state.Slots              // an in-flight rule's FailLocal fallback, or nil

	script       *redis.Script // the single-rule script with this rule's settings written in (nil for a penalty or an in-flight rule)
	args         []any         // that script's arguments at the fixed cost: the clock (""), the cost
	settings     []any         // this rule's arguments of the several-rule script, but the cost (ruleArgs)
	quotedName   string
	limitText    string
	policyHeader string // this rule's RateLimit-Policy item
	body429      []byte
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
	p := l.newPolicy(&rc, len(c.rules) > 0)
	if !p.named {
		r, err := compileRule(c.rule, &rc, false)
		if err != nil {
			return nil, err
		}
		p.rules = []*rule{r}
	}
	if err := p.compileNamed(c, &rc); err != nil {
		return nil, err
	}
	b, err := l.backendFor(rc)
	if err != nil {
		return nil, err
	}
	p.engine, p.hub = b.engine, b.hub
	p.register()
	p.partition()
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
// appending them to p.rules; an error names the rule it is about.
func (p *Policy) compileNamed(c config, rc *routeConfig) error {
	names := map[string]bool{}
	for i, g := range c.rules {
		rcfg, err := namedRuleConfig(c.rule, g, names)
		var r *rule
		if err == nil {
			r, err = compileRule(rcfg, rc, true)
		}
		if err != nil {
			return fmt.Errorf("Rule %d (%q): %w", i+1, rcfg.name, err)
		}
		names[r.name] = true
		p.rules = append(p.rules, r)
	}
	return nil
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

// register prepares the scripts of p's rules and their plans on p's engine,
// and has p's hub track their deny caches and local fallbacks, their bans'
// too.
func (p *Policy) register() {
	for _, r := range p.rules {
		for _, x := range append([]*rule{r}, slices.Collect(maps.Values(r.plans))...) {
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

// partition moves every compiled rule to p.all, then sorts them into the
// rate rules (p.rules) and the in-flight rules (p.slots), and precomputes
// what follows from them: the script calls a request makes, whether any
// rule is tiered, and the RateLimit-Policy header.
func (p *Policy) partition() {
	p.all = p.rules
	p.rules, p.slots = nil, nil
	items := make([]string, len(p.all))
	for i, r := range p.all {
		items[i] = r.policyHeader
		p.tiered = p.tiered || r.plans != nil
		if r.slots > 0 {
			p.slots = append(p.slots, r)
			continue
		}
		p.rules = append(p.rules, r)
		p.calls++
		if r.ban != nil {
			p.calls++
		}
	}
	p.policyHeader = strings.Join(items, ", ")
}

// compileRule compiles one rule of a route. named says whether the route
// declares its rules with Rule, whose 429 bodies name the rule.
func compileRule(rc ruleConfig, route *routeConfig, named bool) (*rule, error) {
	if slices.ContainsFunc(rc.dims, func(d dim) bool { return d.kind == dimUser }) && rc.users == nil {
		return nil, errors.New("Type(User), Type(UserOrIP) or a User dimension needs ginlimit.UserIdentity(...), for example identity.NewJWT(identity.HMACSecret(secret))")
	}
	if rc.ips == nil {
		rc.ips = &identity.IP{}
	}
	if rc.slots > 0 {
		return compileSlots(rc, route, named)
	}
	maxCost, err := rc.checkRate()
	if err != nil {
		return nil, err
	}
	name := rc.ruleName()
	body429, err := rc.body429(name, named)
	if err != nil {
		return nil, err
	}
	param := rc.alg.param(&rc)
	r := &rule{
		name:        name,
		escapedName: escape(name, idSafe),
		prefix:      rc.prefix + rc.alg.keyTag(&rc),
		window:      rc.window,
		limit:       rc.limit,
		alg:         rc.alg,
		maxCost:     maxCost,
		cost:        rc.cost,
		costFunc:    rc.costFunc,
		dims:        rc.dims,
		ips:         rc.ips,
		users:       rc.users,
		hashKey:     rc.hashKey,
		anonByIP:    rc.anonByIP,
		deny:        newDenyCache(route, rc.ban != nil),
		args:        singleArgs("", rc.cost),
		settings:    ruleArgs(rc.alg, rc.window, rc.limit, param),
		quotedName:  sfString(name),
		limitText:   strconv.Itoa(rc.limit),
		body429:     body429,
	}
	if rc.alg != penaltyAlg { // a penalty only ever runs in the several-rule script
		r.script = redis.NewScript(lua.Single(string(rc.alg), rc.window.Microseconds(), int64(rc.limit), int64(param)))
	}
	r.policyHeader = r.quotedName + ";q=" + r.limitText + ";w=" + strconv.FormatInt(ceilSeconds(rc.window), 10)
	r.local = newLocal(route, rc.limit, rc.window)
	if err := r.compileExtras(rc, route, named); err != nil {
		return nil, err
	}
	return r, nil
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
func (r *rule) compileExtras(rc ruleConfig, route *routeConfig, named bool) error {
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

// body429 is the rule's 429 body; named says whether it names the rule.
func (rc *ruleConfig) body429(name string, named bool) ([]byte, error) {
	body := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Rule    string `json:"rule,omitempty"`
	}{Code: 429, Message: rc.message}
	if named {
		body.Rule = name
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("Message(%q): %w", rc.message, err)
	}
	return b, nil
}

// names returns the names of the policy's rules, as in the
// RateLimit-Policy header, joined by commas.
func (p *Policy) names() string {
	names := make([]string, len(p.all))
	for i, r := range p.all {
		names[i] = r.name
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

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
