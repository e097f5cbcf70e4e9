package ginlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// Defaults of the route annotation, the same as the Java @RateLimiter's.
const (
	// DefaultKey is the key prefix used when no [Key] is given.
	DefaultKey = "rate_limit:"
	// DefaultWindow is the window used when no [Window] is given.
	DefaultWindow = 10 * time.Second
	// DefaultLimit is the limit used when no [Limit] is given.
	DefaultLimit = 20
	// DefaultMessage is the 429 message used when no [Message] is given.
	DefaultMessage = "Too many requests, please try again later"
	// DefaultTimeout bounds how long Redis may take to answer a decision's
	// call when no [Timeout] is given. A Redis that refuses connections fails
	// a decision at once; one that does not answer costs up to twice the bound
	// (the call, then a PING that tells a hung Redis from a process that read
	// its reply late) until the breaker opens. A call that runs out of it
	// while Redis answers the PING is saturation ([ErrSaturated]), never an
	// admission. 250 ms is the shortest bound that took no healthy decision
	// for a Redis failure on a loaded machine; docs/operations.md gives the
	// measurements per Timeout.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultDenyCacheSize is how many rejected keys a rule remembers in
	// process when no [DenyCache] is given.
	DefaultDenyCacheSize = 10_000
)

// An Option configures a [Limiter] (as the default of every route it
// serves) or one route's [RateLimit] annotation (on top of its limiter's);
// every option is accepted in both. The compiler tells two kinds apart:
//
//   - route options concern the whole request: [Redis], [Timeout],
//     [OnFailure], [LocalInstances], [DenyCache], [Shadow], [Headers],
//     [Respond], [Observe], [Rule], and a *[Limiter] given to [RateLimit];
//   - rule options ([RuleOption]) concern one count: [Key], [Name],
//     [Window], [Limit], [Message], [Per], [Algorithm], [Burst], [Cost],
//     [LimitBy], [Ban], [InFlight], [IPIdentity], [UserIdentity] and
//     [HashIdentities]. Outside a [Rule] they apply to every rule of the
//     route; a Rule accepts only them, so a route option there does not compile.
//
// For an invalid argument, [New] and [Limiter.Policy] return an error and
// the RateLimit forms panic, each naming the option.
type Option interface {
	apply(*config) error
}

// A RuleOption configures one rule: what is counted, per what, and how
// much. See [Option] for the two kinds of options.
type RuleOption interface {
	Option
	applyRule(*rule.Config) error
}

// routeOption is an option that concerns the whole request.
type routeOption func(*routeConfig) error

func (f routeOption) apply(c *config) error { return f(&c.route) }

// ruleOption is an option that concerns one rule; outside a Rule it sets
// the default of every rule of the route.
type ruleOption func(*rule.Config) error

func (f ruleOption) apply(c *config) error          { return f(&c.rule) }
func (f ruleOption) applyRule(r *rule.Config) error { return f(r) }

// config is what the options of a limiter and a route add up to.
type config struct {
	route routeConfig
	rule  rule.Config // the default of every rule
	rules []ruleGroup // the route's Rule(...) groups, in order; none for a single rule
}

// routeConfig is what concerns the whole request.
type routeConfig struct {
	client         redis.Scripter
	timeout        time.Duration
	queueTimeout   time.Duration
	onFail         FailPolicy
	localInstances int              // LocalInstances's n; 0: the heartbeat's count
	instances      *state.Instances // what the fallbacks divide by (presence.go)
	breakFailures  int
	breakOpen      time.Duration
	autoPipeline   bool
	deny           int
	staleness      time.Duration
	logger         *slog.Logger
	shadow         bool
	headers        HeaderStyle
	respond        func(*gin.Context, Decision)
	observers      []func(context.Context, Event)
}

func defaults() config {
	return config{
		route: routeConfig{
			timeout:       DefaultTimeout,
			queueTimeout:  DefaultQueueTimeout,
			autoPipeline:  true,
			deny:          DefaultDenyCacheSize,
			staleness:     DefaultMaxStaleness,
			breakFailures: DefaultBreakerFailures,
			breakOpen:     DefaultBreakerOpen,
			onFail:        FailLocal,
			headers:       HeadersBoth,
		},
		rule: rule.Config{
			Common: rule.Common{Prefix: DefaultKey, Message: DefaultMessage},
			Rate:   rule.RateSettings{Alg: slidingLog(), Window: DefaultWindow, Limit: DefaultLimit, SubWindows: DefaultSubWindows, Cost: 1},
		},
	}
}

// with returns c with opts applied, and every invalid option's error.
func (c config) with(opts []Option) (config, error) {
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("option %d is nil", i+1))
			continue
		}
		if err := o.apply(&c); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// ruleGroup is one Rule(...) of a route.
type ruleGroup []RuleOption

func (g ruleGroup) apply(c *config) error {
	for i, o := range g {
		if o == nil {
			return fmt.Errorf("Rule: option %d is nil", i+1)
		}
	}
	c.rules = append(c.rules[:len(c.rules):len(c.rules)], g)
	return nil
}

// Rule adds one rule to a route that enforces several at once, for example
// 10 per second and 1,000 per hour, or per IP and per user together:
//
//	limiter.RateLimit(ginlimit.Key("api:"),
//		ginlimit.Rule(ginlimit.Name("burst"), ginlimit.Window(time.Second), ginlimit.Limit(10)),
//		ginlimit.Rule(ginlimit.Name("hourly"), ginlimit.Window(time.Hour), ginlimit.Limit(1000), ginlimit.Per(ginlimit.User)))
//
// Rule options outside the Rules apply to every rule, and each Rule's own
// on top. A Rule accepts only [RuleOption]s, and each rule needs a
// distinct [Name], which the headers list and a 429 names. One script call
// decides all the rules, atomically and all or nothing, on keys that share
// the route template as their Redis Cluster hash tag:
//
//	<prefix>{<METHOD> <route template>} rule:<name>[ <dimension>]
func Rule(opts ...RuleOption) Option {
	return ruleGroup(append([]RuleOption(nil), opts...))
}

// forRules is what a rule of the route takes from it (see rule.Route).
func (rc *routeConfig) forRules() rule.Route {
	return rule.Route{DenySize: rc.deny, Staleness: rc.staleness, Local: rc.onFail == FailLocal, Instances: rc.instances}
}
