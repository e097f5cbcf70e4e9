package ginlimit

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
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
	logs   *decide.LogThrottle
	secret []byte // keys the identity tags of log lines

	mu       sync.Mutex
	backends map[engine.Config]*backend
	owned    []*backend // every backend made, for Close
	closed   bool
	groups   map[string]group // each Shared group, by its Key and Name (claimGroups)

	subscribe bool // its fleets subscribe to ResetChannel and beat; else they are driven (Fleet.Touch)

	counts map[redis.Scripter]*state.Instances // the count of instances per client (presence.go)
	fleets map[redis.Scripter]*backend         // the backend whose fleet keeps each client in step

	registry registry // what RateLimit compiled (registry.go)
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

// newLimiter returns a limiter of base. subscribe says whether its fleets
// run their upkeep loops, subscribe to ResetChannel and beat (see
// fleet.Config): a Limiter from New does, and stops them on Close; the one
// a package-level RateLimit makes for itself does not, since nothing would
// close it: it follows resets by the staleness bound alone, and its
// requests start its polls of the overrides (Fleet.Touch).
func newLimiter(base config, subscribe bool) *Limiter {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	return &Limiter{base: base, logs: &decide.LogThrottle{}, secret: secret, backends: map[engine.Config]*backend{}, subscribe: subscribe}
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
	l.registry.add(p)
	return p.route.Serve
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
// engine that makes their calls, and the fleet that keeps them in step
// with the other instances (one per client: the first backend's).
type backend struct {
	engine *engine.Engine
	fleet  *fleet.Fleet
	live   *decide.Live // the overrides its policies follow
	owner  bool         // it started fleet, and stops it
}

// close ends what b runs in the background: its fleet's upkeep and
// subscription, then its engine, which they call through.
func (b *backend) close() {
	if b.owner {
		b.fleet.Close()
	}
	b.engine.Close()
}

// backendFor returns l's backend for the client and backend settings of rc,
// making it the first time: its engine loads every script, and it joins
// the client's fleet, started the first time (fleetFor).
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
	e.Watch(&decide.OutageLog{Logger: rc.logger})
	b := l.fleetFor(rc.client, shared, e)
	if shared {
		l.backends[k] = b
	}
	l.owned = append(l.owned, b)
	return b, nil
}

// fleetFor returns a backend on e that shares the fleet of client, started
// on e the first time (or every time, for a client that cannot be a map
// key). l.mu is held.
func (l *Limiter) fleetFor(client redis.Scripter, shared bool, e *engine.Engine) *backend {
	if shared && l.fleets[client] != nil {
		owner := l.fleets[client]
		return &backend{engine: e, fleet: owner.fleet, live: owner.live}
	}
	b := &backend{engine: e, live: &decide.Live{}, owner: true}
	cfg := fleet.Config{Engine: e, Loaded: e.Loaded(), Driven: !l.subscribe, OnLimits: b.live.Apply, Canonical: decide.IsField}
	if l.subscribe {
		cfg.Count = l.countOn(client)
		if sub, ok := client.(fleet.Subscriber); ok {
			cfg.Subscriber = sub
		}
	}
	b.fleet = fleet.Start(cfg)
	if shared {
		if l.fleets == nil {
			l.fleets = map[redis.Scripter]*backend{}
		}
		l.fleets[client] = b
	}
	return b
}

// allScripts are the scripts every engine loads at start-up; each rule's
// single-rule script is loaded when its route is compiled (decide.Route.Ready).
var allScripts = append(decide.Scripts(), fleet.Scripts()...)

// errClosed is the error of compiling a route on a closed Limiter.
var errClosed = errors.New("the Limiter is closed")

// Close stops what the limiter runs in the background, per Redis client:
// the subscription to [ResetChannel] (see [Policy.Reset]), and the upkeep
// that beats in [InstancesKey] and polls the overrides ([Policy.SetLimit]);
// it then takes its id out of InstancesKey (best effort, so that the
// instances that stay do not count it: one call per client, bounded as a
// heartbeat is, at once on a Redis known to be down). Its routes keep deciding, on the overrides they
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
// [Policy.Reset] (it follows resets within [DefaultMaxStaleness]), polls
// the overrides at most once a second while requests come, on a goroutine
// no request waits for, and keeps its auto-pipeliner until the Redis
// client is closed. Prefer limiter.RateLimit. An invalid option panics
// here, at start-up, naming the option.
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
	return p.route.Serve
}
