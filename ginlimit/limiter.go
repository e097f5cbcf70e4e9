package ginlimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// Limiter holds what the routes of an application share: the Redis
// backend, the identity settings, the failure policy, and defaults for any
// other [Option]. Give it once and let each route state only its own rule,
// with [Limiter.RateLimit]:
//
//	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.UserIdentity(jwt))
//	r.GET("/api/coupon/claim", limiter.RateLimit(ginlimit.Limit(3), ginlimit.Per(ginlimit.User)), claim)
//
// A Limiter keeps one backend per Redis client: the scripts are loaded once,
// at New, and the routes share its circuit breakers, so a Redis outage trips
// one breaker, not one per route.
//
// A Limiter is safe for concurrent use. Two limiters share nothing, and
// neither does a limiter with the rest of the process.
type Limiter struct {
	base   config
	logs   *logThrottle
	secret []byte // keys the identity tags of log lines

	mu       sync.Mutex
	backends map[engine.Config]*backend
	owned    []*backend // every backend made, for Close
	closed   bool
	groups   map[string]group // each Shared group, by its Key and Name (claimGroups)

	subscribe bool // the backends' hubs subscribe to resets

	id       string                       // this limiter's random instance id (presence.go)
	presence map[redis.Scripter]*presence // the count of instances per client, and its heartbeat
}

// New returns a Limiter with opts as the defaults of every route it serves.
// It needs a Redis backend ([Redis]), loads the scripts on it, and starts
// announcing itself there, so that [FailLocal] knows how many instances
// share it (see [HeartbeatPeriod]); [Limiter.Close] stops that. An
// invalid option is returned as an error that names it.
func New(opts ...Option) (*Limiter, error) {
	c, err := defaults().with(opts)
	if err != nil {
		return nil, fmt.Errorf("ginlimit.New: %w", err)
	}
	l := newLimiter(c, true)
	// Compile the defaults as a route would see them, so that a bad limiter
	// fails here and not on its first request.
	if _, err := l.compile(c); err != nil {
		return nil, fmt.Errorf("ginlimit.New: %w", err)
	}
	return l, nil
}

// newLimiter returns a limiter of base. subscribe says whether its backends
// subscribe to resets (see coherence.go): a Limiter from New does, and
// closes the subscriptions on Close; the one a package-level RateLimit
// makes for itself does not, since nothing would close it, and follows
// Redis by the staleness bound alone.
func newLimiter(base config, subscribe bool) *Limiter {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	return &Limiter{base: base, logs: &logThrottle{}, secret: secret, backends: map[engine.Config]*backend{}, subscribe: subscribe}
}

// RateLimit returns the rate limit of one route, its options applied on top
// of l's, the Gin counterpart of Java's
// @RateLimiter(key, window, limit, message, type):
//
//	r.GET("/api/coupon/claim", limiter.RateLimit(
//		ginlimit.Key("coupon:claim:"), ginlimit.Window(60*time.Second), ginlimit.Limit(3),
//		ginlimit.Message("You are claiming coupons too often, please try again later"),
//		ginlimit.Per(ginlimit.User)), claim)
//
// Every configuration error, including a User rule without a user
// identity, panics here, at start-up, naming the option. A limited request
// gets 429 with {"code":429,"message":"<message>"} and the chain is
// aborted. Given to a group with Use, it counts each route of the group
// separately; with Per([Shared]) the group has one budget.
func (l *Limiter) RateLimit(opts ...Option) gin.HandlerFunc {
	p, err := l.Policy(opts...)
	if err != nil {
		panic(fmt.Sprintf("ginlimit: Limiter.RateLimit: %v", err))
	}
	return p.serve
}

// Policy compiles opts on top of l's defaults into a [Policy]: the same
// rules and counts as l.RateLimit(opts...) attaches to a route, to look at
// or reset them ([Policy.Peek], [Policy.Reset]) or to decide outside gin
// ([Policy.Allow]). Give the route and the Policy the same options:
//
//	opts := []ginlimit.Option{ginlimit.Key("coupon:claim:"), ginlimit.Limit(3), ginlimit.Per(ginlimit.User)}
//	r.GET("/api/coupon/claim", limiter.RateLimit(opts...), claim)
//	claims, err := limiter.Policy(opts...) // for the admin's Peek and Reset
func (l *Limiter) Policy(opts ...Option) (*Policy, error) {
	c, err := l.base.with(opts)
	if err == nil {
		var p *Policy
		if p, err = l.compile(c); err == nil {
			if err = l.claimGroups(p); err == nil {
				return p, nil
			}
		}
	}
	return nil, err
}

// apply refuses a Limiter anywhere but among the options of the
// package-level [RateLimit], which takes it out before it applies the rest.
func (l *Limiter) apply(*config) error {
	return errors.New("a *Limiter is an option of ginlimit.RateLimit only: give the others to it, or use limiter.RateLimit(...)")
}

// backend is what the routes of a Limiter on one Redis client share: the
// engine that makes their calls, and the hub that keeps their deny caches
// and fallbacks coherent with Redis (nil without a subscription).
type backend struct {
	engine *engine.Engine
	hub    *state.Hub
	live   *liveLimits // follows the overrides (overrides.go)
}

// close ends what b runs in the background: the overrides' poll, then the
// hub, since its acknowledgements go through the engine.
func (b *backend) close() {
	b.live.close()
	b.hub.Close()
	b.engine.Close()
}

// backendFor returns l's backend for the client and backend settings of rc,
// making it the first time: its engine loads every script, and, when l
// subscribes, its hub subscribes to resets (coherence.go).
func (l *Limiter) backendFor(rc routeConfig) (*backend, error) {
	k := engine.Config{Client: rc.client, BreakerFailures: rc.breakFailures, BreakerOpen: rc.breakOpen, AutoPipeline: rc.autoPipeline}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errClosed
	}
	shared := k.Shareable()
	if shared {
		if b := l.backends[k]; b != nil {
			return b, nil
		}
	}
	e, err := engine.New(k, allScripts...)
	if err != nil {
		return nil, fmt.Errorf("autoPipeline(true): %w", err)
	}
	e.Watch(&outageLog{logger: rc.logger})
	b := &backend{engine: e, live: startLive(e, e.Loaded(), l.subscribe)}
	if l.subscribe {
		l.announce(rc.client, e)
		wait := time.Duration(0)
		if e.Loaded() {
			wait = subscribeWait // Redis answers: the subscription will not be long
		}
		if sub, ok := rc.client.(state.Subscriber); ok {
			b.hub = state.StartHub(sub, ResetChannel, publishVia(e), wait)
		}
	}
	if shared {
		l.backends[k] = b
	}
	l.owned = append(l.owned, b)
	return b, nil
}

// allScripts are the scripts every engine loads at start-up; each rule's
// single-rule script is loaded when its route is compiled (Policy.register).
var allScripts = []*redis.Script{severalScript, peekScript, resetScript, publishScript, slotScript, versionScript, loadScript, setLimitScript}

// publishVia returns how a hub publishes on ResetChannel through e: it
// returns how many subscribers received the payload.
func publishVia(e *engine.Engine) state.Publish {
	return func(ctx context.Context, payload string) (int64, error) {
		reply, _, err := e.Run(ctx, state.HubTimeout, state.HubTimeout, publishScript, []string{ResetChannel}, []any{ResetChannel, payload})
		if err != nil {
			return 0, err
		}
		if len(reply) != 1 {
			return 0, fmt.Errorf("unexpected PUBLISH reply of %d elements", len(reply))
		}
		return reply[0], nil
	}
}

// errClosed is the error of compiling a route on a closed Limiter.
var errClosed = errors.New("the Limiter is closed")

// Close stops what the limiter runs in the background: the subscription of
// each Redis client to [ResetChannel] (see [Policy.Reset]), its
// heartbeat in [InstancesKey], whose id it then takes out of that key
// (best effort, so that the instances that stay do not count it: one call
// per client, bounded as a heartbeat is, at once on a Redis known to be
// down), and the poll of the overrides
// ([Policy.SetLimit]). Its routes keep deciding, on the overrides they
// last saw, but their deny caches learn nothing more, so every decision
// goes to Redis; no new route can be compiled on it. It closes the small
// connection pools it made for in-flight renewals and releases (see
// [InFlight]), whose calls go through the application's client from then
// on; it does not close the Redis clients, which are the application's.
// Close is safe to call more than once, and always returns nil.
func (l *Limiter) Close() error {
	l.mu.Lock()
	l.closed = true
	owned := l.owned
	l.owned = nil
	l.mu.Unlock()
	l.silence() // the heartbeats call through the engines
	for _, b := range owned {
		b.close()
	}
	return nil
}

// RateLimit returns the per-route rate limit as a package-level
// annotation, the design card's, the same as [Limiter.RateLimit] for the
// limiter given among opts:
//
//	r.GET("/api/coupon/claim", ginlimit.RateLimit(limiter,
//		ginlimit.Key("coupon:claim:"), ginlimit.Window(60*time.Second), ginlimit.Limit(3),
//		ginlimit.Per(ginlimit.User)), claim)
//
// Without a *[Limiter] among opts, the route makes a limiter of its own,
// which needs [Redis] and which nothing closes: it does not subscribe to
// [Policy.Reset] (it follows resets within [DefaultMaxStaleness]), a
// request that finds its overrides [OverridePoll] old starts a poll in the
// background and does not wait for it, and its auto-pipeliner lives until
// the Redis client is closed. Prefer limiter.RateLimit. An invalid option
// panics here, at start-up, naming the option.
func RateLimit(opts ...Option) gin.HandlerFunc {
	var l *Limiter
	rest := make([]Option, 0, len(opts))
	for _, o := range opts {
		x, ok := o.(*Limiter)
		switch {
		case !ok:
			rest = append(rest, o)
		case x == nil:
			panic("ginlimit.RateLimit: the *Limiter is nil")
		case l != nil:
			panic("ginlimit.RateLimit: two Limiters: give one")
		default:
			l = x
		}
	}
	if l == nil {
		l = newLimiter(defaults(), false)
	}
	p, err := l.Policy(rest...)
	if errors.Is(err, errNoBackend) {
		err = fmt.Errorf("%w; or give the route its Limiter: ginlimit.RateLimit(limiter, ...)", err)
	}
	if err != nil {
		panic(fmt.Sprintf("ginlimit.RateLimit: %v", err))
	}
	return p.serve
}
