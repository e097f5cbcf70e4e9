package ginlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/identity"
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
	// DefaultTimeout bounds each decision's Redis call when no [Timeout] is
	// given.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultDenyCacheSize is how many rejected keys a rule remembers in
	// process when no [DenyCache] is given.
	DefaultDenyCacheSize = 10_000
)

// An Option configures a [Limiter] (as the default of every route it serves)
// or one route's [RateLimit] annotation (on top of its limiter's). Every
// option is accepted in both places.
//
// There are two kinds of options, and the compiler tells them apart:
//
//   - Route options concern the whole request: [Redis], [Timeout],
//     [OnFailure], [LocalInstances], [Breaker], [AutoPipeline], [DenyCache],
//     [Logger], [Shadow], [Headers], [Skip], [OnLimited], [OnError],
//     [Respond], [Observe] and [Rule] itself. They are plain Options.
//   - Rule options concern one count: [Key], [Name], [Window], [Limit],
//     [Message], [Type], [Algorithm], [SubWindows], [Burst], [Cost],
//     [CostFunc], [Tiers], and how the count's identity is found:
//     [IPIdentity], [UserIdentity], [HashIdentities], [AnonymousByIP]. They
//     are [RuleOption]s, which are Options too: outside a [Rule] they apply
//     to every rule of the route.
//
// [Rule] accepts only RuleOptions, so a route option inside a Rule does not
// compile.
//
// An invalid argument is reported when the options are used: [New] and
// [Limiter.Policy] return an error and [RateLimit] panics, each naming the
// option.
type Option interface {
	apply(*config) error
}

// A RuleOption configures one rule: what is counted, per what, and how
// much. See [Option] for the two kinds of options.
type RuleOption interface {
	Option
	applyRule(*ruleConfig) error
}

// routeOption is an option that concerns the whole request.
type routeOption func(*routeConfig) error

func (f routeOption) apply(c *config) error { return f(&c.route) }

// ruleOption is an option that concerns one rule; outside a Rule it sets
// the default of every rule of the route.
type ruleOption func(*ruleConfig) error

func (f ruleOption) apply(c *config) error         { return f(&c.rule) }
func (f ruleOption) applyRule(r *ruleConfig) error { return f(r) }

// config is what the options of a limiter and a route add up to.
type config struct {
	route routeConfig
	rule  ruleConfig  // the default of every rule
	rules []ruleGroup // the route's Rule(...) groups, in order; none for a single rule
}

// routeConfig is what concerns the whole request.
type routeConfig struct {
	client         redis.Scripter
	timeout        time.Duration
	onFail         FailPolicy
	localInstances int
	breakFailures  int
	breakOpen      time.Duration
	autoPipeline   bool
	deny           int
	logger         *slog.Logger
	shadow         bool
	headers        HeaderStyle
	skip           func(*gin.Context) bool
	onLimited      func(*gin.Context, Decision)
	onError        func(*gin.Context, error)
	respond        func(*gin.Context, Decision)
	observers      []Observer
}

// ruleConfig is what concerns one count.
type ruleConfig struct {
	prefix     string
	name       string
	window     time.Duration
	limit      int
	message    string
	typ        LimitType
	alg        AlgorithmKind
	subWindows int
	burst      int
	cost       int
	costFunc   func(*gin.Context) int
	tierClaim  string
	tierLimits map[string]int
	ips        *identity.IP
	users      identity.User
	hashKey    []byte
	anonByIP   bool
}

func defaults() config {
	return config{
		route: routeConfig{
			timeout:        DefaultTimeout,
			deny:           DefaultDenyCacheSize,
			breakFailures:  DefaultBreakerFailures,
			breakOpen:      DefaultBreakerOpen,
			localInstances: 1,
		},
		rule: ruleConfig{
			prefix:     DefaultKey,
			window:     DefaultWindow,
			limit:      DefaultLimit,
			message:    DefaultMessage,
			subWindows: DefaultSubWindows,
			cost:       1,
		},
	}
}

// with returns c with opts applied, and every invalid option's error.
func (c config) with(opts []Option) (config, error) {
	var errs []error
	for _, o := range opts {
		if err := o.apply(&c); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// ruleGroup is one Rule(...) of a route.
type ruleGroup []RuleOption

func (g ruleGroup) apply(c *config) error {
	c.rules = append(c.rules[:len(c.rules):len(c.rules)], g)
	return nil
}

// Rule adds one rule to a route that enforces several at once, for example
// 10 per second and 1,000 per hour, or per IP and per user together:
//
//	limiter.RateLimit(ginlimit.Key("api:"),
//		ginlimit.Rule(ginlimit.Name("burst"), ginlimit.Window(time.Second), ginlimit.Limit(10)),
//		ginlimit.Rule(ginlimit.Name("hourly"), ginlimit.Window(time.Hour), ginlimit.Limit(1000), ginlimit.Type(ginlimit.User)))
//
// The rule options outside the Rules apply to every rule; each Rule's own
// options apply on top, for that rule only. A Rule accepts only
// [RuleOption]s: an option that concerns the whole route (Redis, Timeout,
// OnFailure, Shadow, Headers, Respond, ...) does not compile inside one. Each
// rule needs a distinct [Name], which the headers list and a 429 names.
//
// One script call decides all the rules, atomically and all or nothing: a
// request is admitted only if every rule admits it, and a request rejected by
// one rule consumes nothing from the others. The keys of one route share a
// Redis Cluster hash tag, the route template, so they live in one slot:
//
//	<prefix>{<METHOD> <route template>} rule:<name>[ ip:<addr>| user:<id>]
//
// A route with Rules has everything a single-rule route has: the deny
// cache, [Tiers], cost and the failure policy apply rule by rule.
func Rule(opts ...RuleOption) Option {
	return ruleGroup(append([]RuleOption(nil), opts...))
}

// Type sets what the limit is counted per: [Method] (the default), [IP] or
// [User].
func Type(t LimitType) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if t < Method || t > User {
			return fmt.Errorf("Type(%v): want Method, IP or User", t)
		}
		r.typ = t
		return nil
	})
}

// maxWindow is the longest window the scripts accept (1e15 µs, about 31
// years).
const maxWindow = 1e15 * time.Microsecond

// Key sets the Redis key prefix, the Java annotation's key. The default is
// [DefaultKey]. It must not be empty and must not contain '{' or '}', which
// would move the key's Redis Cluster hash tag.
func Key(prefix string) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		switch {
		case prefix == "":
			return fmt.Errorf("Key(%q): the key prefix must not be empty", prefix)
		case strings.ContainsAny(prefix, "{}"):
			return fmt.Errorf("Key(%q): the key prefix must not contain '{' or '}' (they make the Redis Cluster hash tag)", prefix)
		}
		r.prefix = prefix
		return nil
	})
}

// Name sets the rule's name: the policy name in the RateLimit-Policy and
// RateLimit headers and [Decision.Rule]. It must be printable ASCII. By
// default it is the key prefix without its trailing colons; each [Rule] of a
// route needs its own.
func Name(name string) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if name == "" || !printableASCII(name) {
			return fmt.Errorf("Name(%q): the name must be non-empty printable ASCII", name)
		}
		r.name = name
		return nil
	})
}

// Window sets the length of the window. The default is [DefaultWindow]. It
// must be from 1 ms to about 31 years and is kept at microsecond precision;
// 250*time.Millisecond works as written.
func Window(d time.Duration) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if d < time.Millisecond || d > maxWindow {
			return fmt.Errorf("Window(%v): the window must be from 1ms to %v", d, maxWindow)
		}
		r.window = d.Truncate(time.Microsecond)
		return nil
	})
}

// Limit sets how many requests are admitted per window. The default is
// [DefaultLimit]. It must be between 1 and 1e9.
func Limit(n int) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if n < 1 || n > 1e9 {
			return fmt.Errorf("Limit(%d): the limit must be between 1 and 1e9", n)
		}
		r.limit = n
		return nil
	})
}

// Message sets the message of the rule's 429 body. The default is
// [DefaultMessage].
func Message(msg string) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if msg == "" {
			return fmt.Errorf("Message(%q): the message must not be empty", msg)
		}
		r.message = msg
		return nil
	})
}

// Cost charges each request of the route n units instead of 1, for example
// for a batch endpoint. It must be between 1 and 1e9. A request that costs
// more than the rule can ever admit (the limit, or a token bucket's burst)
// is rejected with 429 and a message saying so; it is never retried or
// queued.
func Cost(n int) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if n < 1 || n > 1e9 {
			return fmt.Errorf("Cost(%d): the cost must be between 1 and 1e9", n)
		}
		r.cost, r.costFunc = n, nil
		return nil
	})
}

// CostFunc charges each request f(c) units, for example by its batch size.
// A result below 1 is charged as 1. f runs on every request and must be
// safe for concurrent use; it must not read the request body unless it
// restores it.
func CostFunc(f func(c *gin.Context) int) RuleOption {
	return ruleOption(func(r *ruleConfig) error {
		if f == nil {
			return errors.New("CostFunc(nil): the function must not be nil")
		}
		r.costFunc = f
		return nil
	})
}

// Redis sets the Redis backend. Any redis.Scripter works: *redis.Client,
// *redis.ClusterClient, *redis.Ring or a redis.UniversalClient. A route must
// get one, from its limiter or its own options. Redis 5 or newer is needed
// (the script reads TIME before it writes); 7 is what the tests run.
//
// Set ContextTimeoutEnabled on the client's options: go-redis then bounds
// socket reads by the decision's deadline. Without it the decision is still
// answered within [Timeout], but each call runs in its own goroutine, and a
// call abandoned on a hung server holds its pooled connection until the
// client's ReadTimeout.
//
// A [Limiter] keeps one backend per client (and per [Breaker] and
// [AutoPipeline] setting): the scripts are loaded once, and every route on
// it shares the circuit breakers, so a Redis outage trips one breaker, not
// one per route.
func Redis(client redis.Scripter) Option {
	return routeOption(func(r *routeConfig) error {
		if client == nil {
			return errors.New("Redis(nil): the Redis client must not be nil")
		}
		r.client = client
		return nil
	})
}

// Timeout bounds each decision's Redis call, inside the request's own
// context. The default is [DefaultTimeout]. It must be positive.
func Timeout(d time.Duration) Option {
	return routeOption(func(r *routeConfig) error {
		if d <= 0 {
			return fmt.Errorf("Timeout(%v): the timeout must be positive", d)
		}
		r.timeout = d
		return nil
	})
}

// Logger sets the logger for Redis errors and configuration errors found
// while serving. The default is slog.Default() at the time of logging.
func Logger(l *slog.Logger) Option {
	return routeOption(func(r *routeConfig) error {
		if l == nil {
			return errors.New("Logger(nil): the logger must not be nil")
		}
		r.logger = l
		return nil
	})
}

// AutoPipeline batches the decisions of concurrent requests into Redis
// pipelines with go-redis's AutoPipeliner (the client's AsyncAutoPipeline),
// which raises throughput under concurrency. Every guarantee stays: each
// decision is still its own atomic script call, and each still returns
// within [Timeout] and the request's context. Only a *redis.Client is
// auto-pipelined: go-redis's cluster auto-pipeliner shares batches across
// masters (one dead master would stall the others) and Ring does not
// auto-pipeline, so those and every other client fall back to one call per
// decision. The default is off, because go-redis marks the AutoPipeliner
// experimental.
func AutoPipeline(enabled bool) Option {
	return routeOption(func(r *routeConfig) error {
		r.autoPipeline = enabled
		return nil
	})
}

// Shadow turns on shadow mode (a dry run): decisions are made and recorded
// as usual and the headers are sent, but a request that would be limited is
// let through; its decision has Shadow set and a debug line is logged. This
// is how to roll out a new limit safely: watch what it would do first. The
// default is off.
func Shadow(enabled bool) Option {
	return routeOption(func(r *routeConfig) error {
		r.shadow = enabled
		return nil
	})
}

// Skip exempts the requests for which skip returns true: they are counted
// nowhere and get no rate limit headers (health checks, internal networks,
// an allow-list of users). skip runs on every request of the route, before
// any identity is resolved, and must be safe for concurrent use.
func Skip(skip func(c *gin.Context) bool) Option {
	return routeOption(func(r *routeConfig) error {
		if skip == nil {
			return errors.New("Skip(nil): the predicate must not be nil")
		}
		r.skip = skip
		return nil
	})
}

// OnLimited calls f for every request the route refuses with 429 (not for
// shadow mode's would-be refusals), before the response is written: a
// refusal by a rule, by the deny cache, by the [FailLocal] fallback, or for
// a cost no rule can admit.
func OnLimited(f func(c *gin.Context, d Decision)) Option {
	return routeOption(func(r *routeConfig) error {
		if f == nil {
			return errors.New("OnLimited(nil): the function must not be nil")
		}
		r.onLimited = f
		return nil
	})
}

// OnError calls f with the (wrapped) error whenever Redis could not decide
// for the route, whatever the failure policy then does.
func OnError(f func(c *gin.Context, err error)) Option {
	return routeOption(func(r *routeConfig) error {
		if f == nil {
			return errors.New("OnError(nil): the function must not be nil")
		}
		r.onError = f
		return nil
	})
}

// Respond replaces the default 429 body: f writes the response for every
// request the route refuses with 429 (for example the application's own
// envelope, or RFC 9457 problem+json) and the chain is then aborted. The
// rate limit headers are already set when f runs; the decision is also in
// [DecisionFrom]. If f writes nothing, the default body is written.
func Respond(f func(c *gin.Context, d Decision)) Option {
	return routeOption(func(r *routeConfig) error {
		if f == nil {
			return errors.New("Respond(nil): the function must not be nil")
		}
		r.respond = f
		return nil
	})
}
