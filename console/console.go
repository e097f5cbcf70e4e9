// Package console is an operator's console for the rate limits of a gin
// application: one call mounts server-rendered pages, and the JSON API
// they post to, that show every rule a [ginlimit.Limiter] compiled, the
// fleet's instances and breakers, each route's decisions per second by
// outcome and its most-refused identities over the last 15 minutes,
// across instances, and that steer the limits: set or clear an override,
// look up an identity's count, reset it, lift a ban. Every change is
// audited in Redis and in the application's log.
//
// The pages need no JavaScript: charts are inline SVG drawn by the server,
// the one stylesheet is embedded in the binary, and the
// Content-Security-Policy allows nothing else. Every page, asset and API
// answer goes through Config.Authorize first. docs/console.md explains the
// design.
package console

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// Config configures Mount.
type Config struct {
	// Limiter is the limiter whose rules the console shows and steers;
	// required.
	Limiter *ginlimit.Limiter
	// Redis is the client the console shares its traffic, refused
	// identities, bans and audit on: the limiter's; required.
	Redis redis.UniversalClient
	// Authorize is asked before every page, asset and API answer: it
	// returns who asks, recorded in the audit, and whether they may. A
	// request it refuses gets 401 and nothing else. Required.
	Authorize func(c *gin.Context) (who string, ok bool)
	// Logger receives the audit lines. The default is slog.Default().
	Logger *slog.Logger
	// Routes lists the application's routes, such as engine.Routes: the
	// overview lists each, so that a route appears before its first request
	// (when gin first tells a Limiter which route a rule is on). Optional.
	Routes func() gin.RoutesInfo

	beatEvery time.Duration // tests only: the beat's period instead of beatPeriod
}

// Console is a mounted console. Give its Observe option to the Limiter's
// routes (or to ginlimit.New, through Observer) so that it sees their
// decisions; call Beat or let it beat every 5 s; Close stops it.
type Console struct {
	log    *slog.Logger
	fleet  *fleet
	gate   *gate
	stop   context.CancelFunc
	done   chan struct{}
	once   sync.Once
	period time.Duration // beatPeriod, or Config.beatEvery
}

// Mount mounts the console's pages and API on r (such as
// engine.Group("/console", ...)) and starts its beat. It fails, naming the
// field, when Limiter, Redis or Authorize is nil.
func Mount(r gin.IRouter, cfg Config) (*Console, error) {
	return mount(r, cfg, NewObserver())
}

// MountWith is Mount for a console that reads the decisions an Observer
// made before the Limiter saw: ginlimit.New(..., obs.Option()).
func MountWith(r gin.IRouter, cfg Config, obs *Observer) (*Console, error) {
	if obs == nil {
		return nil, errors.New("console.MountWith: the Observer must not be nil")
	}
	return mount(r, cfg, obs)
}

// mount checks cfg and builds the console from its parts, one job each:
// the fleet (beat.go, served.go) shares what this instance saw and keeps
// what all shared; the gate (guard.go) lets only the authorized in and
// checks the forms; views gathers what is shown (overview.go, rule.go;
// the audit in steer.go, beside what writes it); pages renders it as HTML
// (pages.go) and api as JSON (api.go); steer makes and audits the changes
// (steer.go).
func mount(r gin.IRouter, cfg Config, obs *Observer) (*Console, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, errors.New("console.Mount: Config.Limiter is required")
	case cfg.Redis == nil:
		return nil, errors.New("console.Mount: Config.Redis is required")
	case cfg.Authorize == nil:
		return nil, errors.New("console.Mount: Config.Authorize is required: the console is an admin surface")
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	f := &fleet{rdb: cfg.Redis, limiter: cfg.Limiter, appRoutes: cfg.Routes, tap: obs}
	g := &gate{authorizer: cfg.Authorize, rdb: cfg.Redis, log: log}
	v := &views{fleet: f, rdb: cfg.Redis, appRoutes: cfg.Routes}
	p := &pages{views: v, gate: g, log: log}
	c := &Console{log: log, fleet: f, gate: g, done: make(chan struct{}), period: cmp.Or(cfg.beatEvery, beatPeriod)}
	obs.mu.Lock()
	obs.rules = cfg.Limiter.Rules
	obs.mu.Unlock()
	mountRoutes(r, g, p, &api{views: v}, &steer{views: v, pages: p, rdb: cfg.Redis, log: log})
	bg, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.run(bg)
	return c, nil
}

// withPeriod is mount with a beat every period instead of beatPeriod.
func withPeriod(r gin.IRouter, cfg Config, obs *Observer, period time.Duration) (*Console, error) {
	cfg.beatEvery = period
	return mount(r, cfg, obs)
}

// Observe returns the option that lets the console see a route's
// decisions: give it to limiter.RateLimit of each route compiled after
// Mount, or use Observer and MountWith to give it to ginlimit.New.
func (c *Console) Observe() ginlimit.Option { return c.fleet.tap.Option() }

// Close stops the beat. It is safe to call more than once and returns nil.
func (c *Console) Close() error {
	c.once.Do(func() {
		c.stop()
		<-c.done
	})
	return nil
}

// Beat shares what this instance saw since its last beat and reads back
// the fleet's, in one Redis call. The console beats every 5 s on its own;
// tests call Beat to drive it.
func (c *Console) Beat(ctx context.Context) error { return c.fleet.beat(ctx) }

// token is the form token of who (see gate.token), as a console page
// carries it.
func (c *Console) token(who string) string { return c.gate.token(who) }

// run beats every beatPeriod until ctx ends.
func (c *Console) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			bctx, cancel := context.WithTimeout(ctx, beatPeriod)
			if err := c.Beat(bctx); err != nil {
				c.log.LogAttrs(bctx, slog.LevelWarn, "ginlimit/console: beat failed", slog.String("error", err.Error()))
			}
			cancel()
		}
	}
}
