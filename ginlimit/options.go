package ginlimit

import (
	"fmt"

	"github.com/gin-gonic/gin"
	"log/slog"
	"time"

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

// LimitType says what a route's limit is counted per: the whole route, each
// client IP, or each authenticated user. It is the Java annotation's type.
type LimitType int

const (
	// Method counts every request to the route in one bucket.
	Method LimitType = iota
	// IP counts per client IP address (see identity.IP for proxies).
	IP
	// User counts per authenticated user id. A request without a valid
	// identity is answered 401 and counted nowhere.
	User
)

// String returns "Method", "IP" or "User".
func (t LimitType) String() string {
	switch t {
	case Method:
		return "Method"
	case IP:
		return "IP"
	case User:
		return "User"
	}
	return fmt.Sprintf("LimitType(%d)", int(t))
}

// FailPolicy says what a route does when Redis cannot decide (an error or a
// timeout).
type FailPolicy int

const (
	// FailOpen allows the request and logs the error. It is the default: a
	// rate limiter outage must not become a service outage.
	FailOpen FailPolicy = iota
	// FailClosed answers 503 with a JSON body.
	FailClosed
	// FailLocal decides with an in-process limiter of the same rule while
	// Redis is failing: a token bucket per key refilling limit/n per window,
	// where n is [LocalInstances]. Its decisions have Local set. It is
	// bounded in memory (DefaultLocalKeys keys per rule).
	FailLocal
)

// String returns "FailOpen" or "FailClosed".
func (p FailPolicy) String() string {
	switch p {
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	case FailLocal:
		return "FailLocal"
	}
	return fmt.Sprintf("FailPolicy(%d)", int(p))
}

// An Option configures a [Limiter] (as the default of every route it serves)
// or one route's [RateLimit] annotation (overriding the limiter). Every option
// is accepted in both places; a route's options are applied after its
// limiter's.
//
// An invalid argument is reported when the options are used: [New] and
// [Limiter.Policy] return an error and [RateLimit] panics, each naming the
// option.
type Option interface {
	apply(*settings)
}

type optionFunc func(*settings)

func (f optionFunc) apply(s *settings) { f(s) }

// settings is the merged configuration of a limiter or a route.
type settings struct {
	client         redis.Scripter
	prefix         string
	window         time.Duration
	limit          int
	message        string
	typ            LimitType
	name           string
	ips            *identity.IP
	users          identity.User
	onFail         FailPolicy
	timeout        time.Duration
	logger         *slog.Logger
	deny           int
	autoPipeline   bool
	alg            AlgorithmKind
	subWindows     int
	burst          int
	cost           int
	costFunc       func(*gin.Context) int
	rules          [][]Option // Rule(...) groups, in order
	breakFailures  int
	breakOpen      time.Duration
	shadow         bool
	localInstances int
	observers      []Observer
	headers        HeaderStyle
	skip           func(*gin.Context) bool
	onLimited      func(*gin.Context, Decision)
	onError        func(*gin.Context, error)
	respond        func(*gin.Context, Decision)
	hashKey        []byte
	anonByIP       bool
	tierClaim      string
	tierLimits     map[string]int
	inRule         bool // applying the options of one Rule
	errs           []error
}

func defaults() settings {
	return settings{
		prefix:         DefaultKey,
		window:         DefaultWindow,
		limit:          DefaultLimit,
		message:        DefaultMessage,
		timeout:        DefaultTimeout,
		deny:           DefaultDenyCacheSize,
		subWindows:     DefaultSubWindows,
		breakFailures:  DefaultBreakerFailures,
		breakOpen:      DefaultBreakerOpen,
		localInstances: 1,
		cost:           1,
	}
}

func (s *settings) invalid(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf("ginlimit: "+format, args...))
}

// maxWindow is the longest window the scripts accept (1e15 µs, about 31
// years).
const maxWindow = 1e15 * time.Microsecond

// Key sets the Redis key prefix, the Java annotation's key. The default is
// [DefaultKey]. It must not be empty and must not contain '{' or '}', which
// would move the key's Redis Cluster hash tag.
func Key(prefix string) Option {
	return optionFunc(func(s *settings) {
		switch {
		case prefix == "":
			s.invalid("Key(%q): the key prefix must not be empty", prefix)
		case containsAny(prefix, "{}"):
			s.invalid("Key(%q): the key prefix must not contain '{' or '}' (they make the Redis Cluster hash tag)", prefix)
		default:
			s.prefix = prefix
		}
	})
}

// Window sets the length of the window. The default is [DefaultWindow]. It
// must be from 1 ms to about 31 years and is kept at microsecond precision;
// 250*time.Millisecond works as written.
func Window(d time.Duration) Option {
	return optionFunc(func(s *settings) {
		if d < time.Millisecond || d > maxWindow {
			s.invalid("Window(%v): the window must be from 1ms to %v", d, maxWindow)
			return
		}
		s.window = d.Truncate(time.Microsecond)
	})
}

// Limit sets how many requests are admitted per window. The default is
// [DefaultLimit]. It must be between 1 and 1e9.
func Limit(n int) Option {
	return optionFunc(func(s *settings) {
		if n < 1 || n > 1e9 {
			s.invalid("Limit(%d): the limit must be between 1 and 1e9", n)
			return
		}
		s.limit = n
	})
}

// Message sets the message of the 429 body. The default is [DefaultMessage].
func Message(msg string) Option {
	return optionFunc(func(s *settings) {
		if msg == "" {
			s.invalid("Message(%q): the message must not be empty", msg)
			return
		}
		s.message = msg
	})
}

// Type sets what the limit is counted per: [Method] (the default), [IP] or
// [User].
func Type(t LimitType) Option {
	return optionFunc(func(s *settings) {
		if t < Method || t > User {
			s.invalid("Type(%v): want Method, IP or User", t)
			return
		}
		s.typ = t
	})
}

// Name sets the rule's name: the policy name in the RateLimit-Policy and
// RateLimit headers and [Decision.Rule]. It must be printable ASCII. By
// default it is the key prefix without its trailing colons.
func Name(name string) Option {
	return optionFunc(func(s *settings) {
		if name == "" || !printableASCII(name) {
			s.invalid("Name(%q): the name must be non-empty printable ASCII", name)
			return
		}
		s.name = name
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
func Redis(client redis.Scripter) Option {
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(Redis(...)): Redis applies to the whole route, not to one of its rules")
			return
		}
		if client == nil {
			s.invalid("Redis(nil): the Redis client must not be nil")
			return
		}
		s.client = client
	})
}

// IPIdentity sets how the client IP of an [IP] route is found, in particular
// which proxies are trusted to send X-Forwarded-For. By default no proxy is
// trusted and the client is the TCP peer.
func IPIdentity(ip *identity.IP) Option {
	return optionFunc(func(s *settings) {
		if ip == nil {
			s.invalid("IPIdentity(nil): the resolver must not be nil")
			return
		}
		s.ips = ip
	})
}

// UserIdentity sets how the user of a [User] route is found, for example
// identity.NewJWT(...) or identity.FromContext("user_id"). A [User] route
// without it is a configuration error.
func UserIdentity(u identity.User) Option {
	return optionFunc(func(s *settings) {
		if u == nil {
			s.invalid("UserIdentity(nil): the resolver must not be nil")
			return
		}
		s.users = u
	})
}

// OnFailure sets what happens when Redis cannot decide. The default is
// [FailOpen].
func OnFailure(p FailPolicy) Option {
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(OnFailure(...)): OnFailure applies to the whole route, not to one of its rules")
			return
		}
		if p < FailOpen || p > FailLocal {
			s.invalid("OnFailure(%v): want FailOpen, FailClosed or FailLocal", p)
			return
		}
		s.onFail = p
	})
}

// Timeout bounds each decision's Redis call, inside the request's own
// context. The default is [DefaultTimeout]. It must be positive.
func Timeout(d time.Duration) Option {
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(Timeout(...)): Timeout applies to the whole route, not to one of its rules")
			return
		}
		if d <= 0 {
			s.invalid("Timeout(%v): the timeout must be positive", d)
			return
		}
		s.timeout = d
	})
}

// Logger sets the logger for Redis errors and configuration errors found
// while serving. The default is slog.Default() at the time of logging.
func Logger(l *slog.Logger) Option {
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(Logger(...)): Logger applies to the whole route, not to one of its rules")
			return
		}
		if l == nil {
			s.invalid("Logger(nil): the logger must not be nil")
			return
		}
		s.logger = l
	})
}

// DenyCache sets how many keys near or over their limit a rule remembers in
// process; 0 turns the cache off. The default is [DefaultDenyCacheSize].
//
// A sliding-log rejection is certain until the oldest request in the window
// leaves it, on every instance, so the cache answers repeated requests on a
// rejected key without Redis until that moment: a flood on an over-limit key
// costs Redis nothing. The answers are the ones Redis would give, with one
// caveat: a change to the key that does not go through ginlimit, such as an
// administrator deleting it to reset a user, is not seen by an instance until
// its cached moment passes. The cache is bounded by size (per rule) and safe
// for concurrent use.
func DenyCache(size int) Option {
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(DenyCache(...)): DenyCache applies to the whole route, not to one of its rules")
			return
		}
		if size < 0 {
			s.invalid("DenyCache(%d): the size must be 0 (off) or positive", size)
			return
		}
		s.deny = size
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
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(AutoPipeline(...)): AutoPipeline applies to the whole route, not to one of its rules")
			return
		}
		s.autoPipeline = enabled
	})
}

// Cost charges each request of the route n units instead of 1, for example
// for a batch endpoint. It must be between 1 and 1e9. A request that costs
// more than the rule can ever admit (the limit, or a token bucket's burst)
// is rejected with 429 and a message saying so; it is never retried or
// queued.
func Cost(n int) Option {
	return optionFunc(func(s *settings) {
		if n < 1 || n > 1e9 {
			s.invalid("Cost(%d): the cost must be between 1 and 1e9", n)
			return
		}
		s.cost, s.costFunc = n, nil
	})
}

// CostFunc charges each request f(c) units, for example by its batch size.
// A result below 1 is charged as 1. f runs on every request and must be
// safe for concurrent use; it must not read the request body unless it
// restores it.
func CostFunc(f func(c *gin.Context) int) Option {
	return optionFunc(func(s *settings) {
		if f == nil {
			s.invalid("CostFunc(nil): the function must not be nil")
			return
		}
		s.costFunc = f
	})
}

// Shadow turns on shadow mode (a dry run): decisions are made and recorded
// as usual and the headers are sent, but a request that would be limited is
// let through; its decision has Shadow set and a debug line is logged. This
// is how to roll out a new limit safely: watch what it would do first. The
// default is off.
func Shadow(enabled bool) Option {
	return optionFunc(func(s *settings) {
		if s.inRule {
			s.invalid("Rule(Shadow(...)): Shadow applies to the whole route, not to one of its rules")
			return
		}
		s.shadow = enabled
	})
}
