package ginlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/gin-gonic/gin"
)

// Limiter holds what the routes of an engine or route group share: the Redis
// backend, the identity settings, the failure policy, and defaults for any
// other [Option]. Give it once and let each route state only its own rule:
//
//	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.UserIdentity(jwt))
//	api := r.Group("/api", limiter.Middleware())
//	api.GET("/coupon/claim", ginlimit.RateLimit(ginlimit.Limit(3), ginlimit.Type(ginlimit.User)), claim)
//
// A Limiter is safe for concurrent use. Two limiters share nothing, and
// neither does a limiter with the rest of the process.
type Limiter struct {
	base settings
	logs *logThrottle
}

// New returns a Limiter with opts as the defaults of every route it serves.
// It needs a Redis backend ([Redis]). An invalid option is returned as an
// error that names it.
func New(opts ...Option) (*Limiter, error) {
	s := defaults()
	for _, o := range opts {
		o.apply(&s)
	}
	l := &Limiter{base: s, logs: &logThrottle{}}
	// Check the defaults as a route would see them, so that a bad limiter
	// fails here and not on its first request.
	if _, err := compile(s, l.logs); err != nil {
		return nil, fmt.Errorf("ginlimit.New: %w", err)
	}
	return l, nil
}

// Middleware returns a handler that makes l the limiter of every
// [RateLimit] annotation after it in the chain. Use it on the engine or a
// route group.
func (l *Limiter) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) { c.Set(limiterKey{}, l) }
}

// Policy compiles opts on top of l's defaults into a [Policy] for decisions
// outside gin.
func (l *Limiter) Policy(opts ...Option) (*Policy, error) {
	return l.compile(opts)
}

// RateLimit is [RateLimit] bound to l: it needs no [Limiter.Middleware], and
// every configuration error, including a User route without a user identity,
// panics here at start-up.
func (l *Limiter) RateLimit(opts ...Option) gin.HandlerFunc {
	p, err := l.compile(opts)
	if err != nil {
		panic(fmt.Sprintf("ginlimit.RateLimit: %v", err))
	}
	return p.serve
}

func (l *Limiter) compile(opts []Option) (*Policy, error) {
	s := l.base
	s.errs = nil
	for _, o := range opts {
		o.apply(&s)
	}
	return compile(s, l.logs)
}

// RateLimit returns the per-route rate limit, the Gin counterpart of Java's
// @RateLimiter(key, window, limit, message, type):
//
//	r.GET("/api/coupon/claim", ginlimit.RateLimit(
//		ginlimit.Key("coupon:claim:"), ginlimit.Window(60*time.Second), ginlimit.Limit(3),
//		ginlimit.Message("You are claiming coupons too often, please try again later"),
//		ginlimit.Type(ginlimit.User)), claim)
//
// Its options are applied on top of the [Limiter] installed before it with
// [Limiter.Middleware]; without one, the route's own options must include
// [Redis]. An invalid option panics here, at start-up, naming the option. What
// can only be checked against the limiter (no Redis backend, a User route
// without a user identity) is checked on the first request: the request gets
// a 500 and the cause is logged.
//
// An admitted request continues down the chain; a limited one gets 429 with
// {"code":429,"message":"<message>"} and the chain is aborted. See the package
// documentation for the headers and the failure policy.
func RateLimit(opts ...Option) gin.HandlerFunc {
	s := defaults()
	for _, o := range opts {
		o.apply(&s)
	}
	if len(s.errs) > 0 {
		panic(fmt.Sprintf("ginlimit.RateLimit: %v", errors.Join(s.errs...)))
	}
	r := &route{opts: opts, logs: &logThrottle{}}
	return r.serve
}

// route is a RateLimit annotation that finds its limiter at request time and
// compiles its policy once per limiter.
type route struct {
	opts     []Option
	logs     *logThrottle // for requests that reach no limiter
	compiled sync.Map     // *Limiter (nil for none) -> compiled
}

type compiled struct {
	policy *Policy
	err    error
}

func (r *route) serve(c *gin.Context) {
	var l *Limiter
	if v, ok := c.Get(limiterKey{}); ok {
		l, _ = v.(*Limiter)
	}
	v, ok := r.compiled.Load(l)
	if !ok {
		var cp compiled
		if l != nil {
			cp.policy, cp.err = l.compile(r.opts)
		} else {
			s := defaults()
			for _, o := range r.opts {
				o.apply(&s)
			}
			cp.policy, cp.err = compile(s, r.logs)
		}
		v, _ = r.compiled.LoadOrStore(l, cp)
	}
	cp := v.(compiled)
	if cp.err != nil {
		logs, logger := r.logs, (*slog.Logger)(nil)
		if l != nil {
			logs, logger = l.logs, l.base.logger
		}
		logs.log(c.Request.Context(), logger, slog.LevelError, "ginlimit: route is misconfigured; answering 500",
			slog.String("route", c.Request.Method+" "+c.FullPath()), errAttr(cp.err))
		abortJSON(c, 500, bodyInternal)
		return
	}
	cp.policy.serve(c)
}
