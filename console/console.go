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
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
	cfg     Config
	log     *slog.Logger
	tap     *Observer
	fleet   fleet
	beating sync.Mutex             // held by the one Beat under way
	secret  atomic.Pointer[[]byte] // keys the forms' tokens; nil until Redis first gave it
	keying  sync.Mutex             // held by the one request that asks Redis for it
	stop    context.CancelFunc
	done    chan struct{}
	once    sync.Once
	period  time.Duration // beatPeriod, or Config.beatEvery
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

func mount(r gin.IRouter, cfg Config, obs *Observer) (*Console, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, errors.New("console.Mount: Config.Limiter is required")
	case cfg.Redis == nil:
		return nil, errors.New("console.Mount: Config.Redis is required")
	case cfg.Authorize == nil:
		return nil, errors.New("console.Mount: Config.Authorize is required: the console is an admin surface")
	}
	c := &Console{cfg: cfg, log: cfg.Logger, tap: obs, done: make(chan struct{}), period: cmp.Or(cfg.beatEvery, beatPeriod)}
	if c.log == nil {
		c.log = slog.Default()
	}
	obs.mu.Lock()
	obs.rules = cfg.Limiter.Rules
	obs.mu.Unlock()
	c.routes(r)
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
func (c *Console) Observe() ginlimit.Option { return c.tap.Option() }

// Close stops the beat. It is safe to call more than once and returns nil.
func (c *Console) Close() error {
	c.once.Do(func() {
		c.stop()
		<-c.done
	})
	return nil
}

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

// secretKey holds the random key of the forms' tokens, shared by the
// instances so that a form one of them rendered posts to any other.
const secretKey = "{ginlimit:console}:secret"

// formKey returns the fleet's form key, read from Redis (or made there)
// on first use rather than by Mount, so that an application mounts its
// console and starts while Redis is down; nil until Redis has answered.
// One request asks at a time, for at most a second; the others meanwhile
// get nil rather than wait in line.
func (c *Console) formKey() []byte {
	if k := c.secret.Load(); k != nil {
		return *k
	}
	if !c.keying.TryLock() {
		return nil
	}
	defer c.keying.Unlock()
	if k := c.secret.Load(); k != nil {
		return *k
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k, err := sharedSecret(ctx, c.cfg.Redis)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "ginlimit/console: no form key yet; posts from a signed-in browser are refused until Redis answers", errAttr(err))
		return nil
	}
	c.secret.Store(&k)
	return k
}

// sharedSecret returns the fleet's form key, making it if there is none.
func sharedSecret(ctx context.Context, rdb redis.UniversalClient) ([]byte, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	old, err := rdb.SetArgs(ctx, secretKey, b, redis.SetArgs{Mode: "NX", Get: true}).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return b, nil // ours is the key
	case err != nil:
		return nil, fmt.Errorf("form key: %w", err)
	}
	return old, nil
}
