// Package app is the coupon demo of ginlimit: a small Gin service whose routes
// carry the rate limits of the Java @RateLimiter example it mirrors. The
// command in the parent directory serves it; tests import this package and
// drive [App.Handler] with httptest.
//
// # Routes
//
//	POST /api/login                  {"user_id":"alice"} -> {"token":"<HS256 JWT>"}; IP: 10 per hour per client IP
//	GET  /api/coupon/seckill         Method: 100 per 10s over all clients
//	GET  /api/coupon/claim           User:   3 per 60s per bearer-token user, 10 for a "plan":"vip" token; 401 without one
//	GET  /api/vouchers               not limited: the voucher catalog ([Vouchers])
//	GET  /api/vouchers/:id/claim     User+id: 1 per 24h per bearer-token user per voucher id; 404 for an id not in the catalog
//	GET  /api/coupon/merchant        IP:     5 per 1s per client IP
//	GET  /voucher-order/seckill/:id  Method: 5 per 10s over all clients and all ids
//	GET  /healthz                    not limited: {"status":"ok"}, plus "jwks_loaded" with a JWKS URL
//	GET  /metrics                    not limited: the Prometheus metrics of every decision
//	/console/...                     admin: the operator's console (package console); see Console below
//	GET, POST /console/sign-in       the console's sign-in page: keeps an admin token in a cookie
//	GET  /favicon.ico                204: browsers ask for it, and a 404 would be an error in their console
//
//	GET    /api/admin/limits/claim/users/:user  admin: a user's claim count (?plan=vip: in that plan); User: 60 per 60s per admin
//	DELETE /api/admin/limits/claim/users/:user  admin: reset it, 204; User: 60 per 60s per admin
//	GET    /api/admin/limits/claim              admin: the claim rule's limit, window and their source (?plan=, ?user=)
//	PUT    /api/admin/limits/claim              admin: {"limit":n,"window_seconds":w[,"plan"|"user"]} overrides them live; 0 clears; read strictly
//
// An admitted request gets 200 {"code":200,"message":"...","data":{...}},
// where data.remaining is the quota left in the window. A limited one gets 429
// {"code":429,"message":"<the route's message>"} with Retry-After and the
// RateLimit headers; see package ginlimit.
//
// # Admin API
//
// The claim route's rule is a [ginlimit.Policy], compiled once, whose
// Handler limits the route and whose Peek and Reset serve the admin API:
// GET answers 200 with a [ClaimLimitState] (limit, remaining,
// reset_seconds, ...) read without counting; DELETE clears the count and
// answers 204 once every instance sharing the Redis has dropped its cached
// denial, so the user's next claim is admitted wherever it lands.
//
// Both need a bearer token verified by the same identity.JWT as every
// other token of the demo, whose "role" claim is "admin" ([AdminRole]):
// 401 without a valid token, 403 without the role. POST /api/login never
// mints such a token; the command's "token" subcommand does, for whoever
// holds the secret. A :user that is empty, longer than
// [MaxAdminUserIDLen] bytes or not UTF-8 gets 400, and so does a query
// the route does not take; a Redis failure gets 503 with a fixed
// message, its error going to the log. None of these touches Redis. The
// claim rule does not count the admin routes; each has its own limit per
// admin ([AdminLimit] per [AdminWindow]), applied only once the request has
// passed those checks.
//
// # Console
//
// The operator's console of package console is mounted at [ConsolePath],
// fed by an Observer given to the limiter, so it sees every route. Every
// request to it needs an admin token, as for the admin API: as
// "Authorization: Bearer", or in the [ConsoleCookie] that the sign-in page
// at [ConsoleSignInPath] sets (HttpOnly, SameSite=Strict, on the console's
// path). The sign-in form refuses a post from another origin, and the
// console checks the origin and its form token on every change.
//
// # Tokens
//
// Every token is verified by one [identity.JWT]: the demo's own HS256 tokens
// (POST /api/login, the command's "token" subcommand, [NewToken]) with
// [Config.JWTSecret], and, when [Config.JWKSURL] is set, RS256 and ES256
// tokens signed by a key of the JSON Web Key Set published there
// ([identity.RemoteJWKS]). The set is fetched at start-up, which waits for
// it at most 5 s: if the provider is down the service starts anyway, and
// the provider's tokens get 401 until the set arrives, fetched again in the
// background. A token whose kid the set lacks (a key the provider has just
// added) gets 401 and makes the set be fetched again, at most once per
// [JWKSRefetch], so the new key is accepted within 10 s of its first use.
// The claims of such tokens count as the demo's own: "sub" is the user,
// "plan" the plan and "role" the role, so point the URL only at a provider
// that issues tokens for this service.
//
// # Metrics
//
// Every limited route reports its decisions to a metrics.Collector, given to
// ginlimit.New with ginlimit.Observe, and GET /metrics serves it in the
// Prometheus text format: decisions by route template, rule and outcome,
// decision latency, near-limit admissions, deny-cache hits, the circuit
// breaker state, and the resets made through the admin API (by "admin-api",
// [ResetBy]). The labels are route templates and rule names, never a
// client IP or a user id. The demo serves /metrics on its one public port for
// simplicity; a production service would serve it to Prometheus only.
//
// # Redis and secrets
//
// With an empty [Config.RedisURL], [New] starts an in-process miniredis, so
// the demo runs with no setup; its counts die with the process. With an empty
// [Config.JWTSecret] it signs tokens with the public [DevJWTSecret]. Both are
// logged at start-up, the second as a warning.
//
// New does not wait for Redis. While Redis is down, from start-up on or
// later, the limited routes answer under [Config.FailPolicy]; ginlimit logs
// the outage once, with its cause, and again when Redis answers.
//
// Every limited route keeps an HMAC of the client IP or user id in its
// Redis keys, never the identity itself (ginlimit.HashIdentities, keyed
// with [Config.IdentitySecret]), and its RateLimit-Policy header carries
// the matching pk parameter. With no secret configured, New makes a random
// one and says so in the log: counts then start afresh on every restart,
// and instances do not share them.
//
// # Algorithm
//
// Every limited route uses [Config.Algorithm], the sliding log unless set
// (LIMIT_ALGORITHM in the command). It is given to ginlimit.New as the
// limiter's default, so the route table above holds for each algorithm;
// only how strictly "limit per window" holds changes. [New] logs it at
// start-up.
//
// # Client IP
//
// The merchant limit counts per client IP as identity.IP resolves it: the TCP
// peer, or X-Forwarded-For only when the peer is one of
// [Config.TrustedProxies]. Gin's own client IP logic is switched off
// (SetTrustedProxies(nil)) and never used, so there is one answer to "who is
// the client".
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/console"
	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/metrics"
)

// App is the coupon demo service. Serve its Handler and call Close once the
// server has shut down. An App is safe for concurrent use; two Apps share
// nothing, not even their embedded Redis.
type App struct {
	// Handler serves every route of the demo. It is the *gin.Engine.
	Handler http.Handler

	rdb       redis.UniversalClient // nil until New connected
	mini      *miniredis.Miniredis  // nil unless New started one
	users     *identity.JWT         // nil until New made it; refreshes a remote JWKS until Close
	limiter   *ginlimit.Limiter     // nil until New made it
	console   *console.Console      // nil until New mounted it; beats until Close
	closeOnce sync.Once
	closeErr  error
}

// New builds the demo from cfg: it validates the JWT secret, the identity
// secret, the JWKS URL and the trusted proxies, fetches the JWKS when there
// is a URL (waiting at most 5 s; see Tokens in the package doc), makes the
// Redis client (or starts the embedded Redis), and registers the routes.
// It does not wait for Redis: a Redis that is down at start-up is an
// outage like any other, which the rate limiter logs and rides out under
// [Config.FailPolicy] (see Redis and secrets in the package doc). ctx is
// used only during start-up: the JWKS is refreshed in the background until
// [App.Close].
func New(ctx context.Context, cfg Config) (*App, error) {
	logger, err := cfg.defaults()
	if err != nil {
		return nil, err
	}

	secret := cfg.JWTSecret
	if len(secret) == 0 {
		logger.Warn("coupon: JWT_SECRET is not set; signing tokens with the built-in development secret, which is public and insecure")
		secret = []byte(DevJWTSecret)
	}
	ips, err := identity.NewIP(cfg.TrustedProxies...)
	if err != nil {
		return nil, fmt.Errorf("coupon: trusted proxies: %w", err)
	}
	if cfg.IdentitySecret, err = identitySecret(cfg, logger); err != nil {
		return nil, err
	}

	a := &App{}
	if a.users, err = newVerifier(ctx, secret, cfg.JWKSURL, logger); err != nil {
		return nil, err
	}
	if err := a.openStore(cfg, logger); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	// The App's own registry, not the global one: two Apps share nothing.
	collector := metrics.New()
	registry := prometheus.NewRegistry()
	registry.MustRegister(collector)
	// Made before the limiter, so that every route reports to it.
	seen := console.NewObserver()
	claimPolicy, err := a.newLimiter(cfg, ips, collector, seen)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	logger.Info("coupon: rate limiting", slog.String("algorithm", string(cfg.Algorithm)),
		slog.String("fail_policy", string(cfg.FailPolicy)), slog.Bool("shadow", cfg.Shadow))

	writeOrder := cfg.WriteOrder
	if writeOrder == nil {
		writeOrder = sleepOrder
	}
	h := &handlers{secret: secret, users: a.users, logger: logger, limiter: a.limiter,
		remoteJWKS: cfg.JWKSURL != "", writeOrder: writeOrder, vouchers: newCatalog(Vouchers())}
	adm := &admin{users: a.users, logger: logger, claimPolicy: claimPolicy}
	engine, err := newEngine(logger, registry, h, adm)
	if err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if a.console, err = console.MountWith(engine.Group(strings.TrimSuffix(ConsolePath, "/")), console.Config{
		Limiter: a.limiter, Redis: a.rdb, Authorize: adm.consoleAdmin, Logger: logger, Routes: engine.Routes,
	}, seen); err != nil {
		return nil, errors.Join(fmt.Errorf("coupon: console: %w", err), a.Close())
	}
	a.Handler = engine
	return a, nil
}

// defaults fills cfg's defaults and returns its logger. The algorithm is
// checked here, before anything is logged or started, rather than left to
// ginlimit.New, so that the error names the environment variable.
func (cfg *Config) defaults() (*slog.Logger, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.Algorithm == "" {
		cfg.Algorithm = ginlimit.SlidingLog
	}
	if cfg.FailPolicy == "" {
		cfg.FailPolicy = ginlimit.FailLocal
	}
	if err := checkAlgorithm(cfg.Algorithm); err != nil {
		return nil, fmt.Errorf("coupon: Algorithm (LIMIT_ALGORITHM): %w", err)
	}
	return logger, nil
}

// newLimiter makes a's limiter from cfg, on a's Redis and verifier, and
// returns the claim rule's Policy, which the admin routes read and change.
func (a *App) newLimiter(cfg Config, ips *identity.IP, collector *metrics.Collector, seen *console.Observer) (*ginlimit.Policy, error) {
	opts := []ginlimit.Option{
		ginlimit.Redis(a.rdb),
		ginlimit.Observe(collector.Observe),
		seen.Option(),
		ginlimit.UserIdentity(a.users),
		ginlimit.IPIdentity(ips),
		ginlimit.Algorithm(cfg.Algorithm),
		ginlimit.OnFailure(cfg.FailPolicy),
		ginlimit.Shadow(cfg.Shadow),
		ginlimit.HashIdentities(cfg.IdentitySecret),
	}
	if cfg.DecisionTimeout > 0 {
		opts = append(opts, ginlimit.Timeout(cfg.DecisionTimeout))
	}
	var err error
	if a.limiter, err = ginlimit.New(opts...); err != nil {
		return nil, fmt.Errorf("coupon: rate limiter: %w", err)
	}
	claimPolicy, err := a.limiter.Policy(claimOptions(a.users)...)
	if err != nil {
		return nil, fmt.Errorf("coupon: claim rule: %w", err)
	}
	return claimPolicy, nil
}

// openStore makes a's client of the Redis of cfg: its cluster, its URL, or
// the embedded miniredis when there is neither. Into a.rdb only on success: a
// nil *redis.Client would make a non-nil interface that Close would call.
func (a *App) openStore(cfg Config, logger *slog.Logger) error {
	if len(cfg.ClusterAddrs) > 0 {
		a.rdb = openCluster(cfg.ClusterAddrs, logger)
		return nil
	}
	rdb, mini, err := openRedis(cfg.RedisURL, logger)
	if err != nil {
		return err
	}
	a.rdb, a.mini = rdb, mini
	return nil
}

// newEngine returns the demo's gin engine: h's and adm's routes, /metrics
// from registry, the request log and the JSON 404.
func newEngine(logger *slog.Logger, registry *prometheus.Registry, h *handlers, adm *admin) (*gin.Engine, error) {
	engine := gin.New()
	// Nobody is trusted to set the client IP through gin: c.ClientIP() is
	// not used, and the IP limit resolves the client with identity.IP.
	if err := engine.SetTrustedProxies(nil); err != nil {
		return nil, fmt.Errorf("coupon: gin trusted proxies: %w", err)
	}
	// A path no route matches gets the JSON 404, never an HTML redirect
	// to the path with or without a trailing slash: an API client would
	// not follow it, and an admin DELETE must not be bounced.
	engine.RedirectTrailingSlash = false
	engine.Use(requestLog(logger), recovery(logger))
	engine.NoRoute(notFound)
	routes(engine, h, adm)
	engine.GET("/metrics", gin.WrapH(promhttp.HandlerFor(registry, promhttp.HandlerOpts{})))
	// Browsers ask every site for its icon; an empty answer, rather than
	// the JSON 404, keeps an error out of the console's browser console.
	engine.GET("/favicon.ico", func(c *gin.Context) {
		c.Header("Cache-Control", "max-age=86400")
		c.Status(http.StatusNoContent)
	})
	return engine, nil
}

// JWKSRefetch is the least time between two fetches of the JWKS asked for
// by tokens whose kid the set lacks (identity.UnknownKIDRefetch): a key the
// provider adds is accepted about this long after its first use, plus the
// fetch, and a flood of made-up kids costs the provider one request per
// period. It is set here rather than left to the library's default, so that
// the demo's promise, "within 10 s", holds by this code.
const JWKSRefetch = 5 * time.Second

// newVerifier returns the verifier of every token of the demo: HS256 tokens
// signed with secret and, when jwksURL is not empty, RS256 and ES256 tokens
// signed by a key of the JWKS at jwksURL. Its background refresh runs until
// its Close, not until ctx ends, so it is given ctx without its
// cancellation: the first fetch is bounded by the library's StartupTimeout
// (5 s) alone, and a signal that arrives meanwhile takes effect once it
// ends. A provider that is down then leaves the verifier without a set,
// refusing those tokens, rather than failing start-up.
func newVerifier(ctx context.Context, secret []byte, jwksURL string, logger *slog.Logger) (*identity.JWT, error) {
	// Checked alone first, so that a bad secret is blamed on the secret.
	users, err := identity.NewJWT(identity.HMACSecret(secret), identity.Algorithms("HS256"))
	if err != nil {
		return nil, fmt.Errorf("coupon: JWT secret: %w", err)
	}
	if jwksURL == "" {
		return users, nil
	}
	users, err = identity.NewJWT(identity.HMACSecret(secret),
		identity.RemoteJWKS(context.WithoutCancel(ctx), jwksURL,
			identity.JWKSLogger(logger), identity.UnknownKIDRefetch(JWKSRefetch)),
		identity.Algorithms("HS256", "RS256", "ES256"))
	if err != nil {
		// identity's errors name the URL without its password.
		return nil, fmt.Errorf("coupon: JWKSURL (JWKS_URL): %w", err)
	}
	logger.Info("coupon: accepting RS256 and ES256 tokens signed by the keys of JWKS_URL, besides HS256 ones",
		slog.String("jwks_url", redactURL(jwksURL)), slog.Bool("jwks_loaded", users.JWKSLoaded()))
	return users, nil
}

// redactURL is rawURL with its password, if any, replaced by "xxxxx".
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// openRedis makes the client of the Redis at rawURL, or of a new embedded
// miniredis when rawURL is empty. It does not call Redis: the client
// connects on its first command.
func openRedis(rawURL string, logger *slog.Logger) (*redis.Client, *miniredis.Miniredis, error) {
	var opts *redis.Options
	var mini *miniredis.Miniredis
	if rawURL == "" {
		mini = miniredis.NewMiniRedis()
		if err := mini.StartAddr("127.0.0.1:0"); err != nil {
			return nil, nil, fmt.Errorf("coupon: start embedded miniredis: %w", err)
		}
		logger.Info("coupon: REDIS_URL is not set; started an embedded in-process miniredis (counts are lost on exit)",
			slog.String("addr", mini.Addr()))
		opts = &redis.Options{Addr: mini.Addr()}
	} else {
		var err error
		if opts, err = redis.ParseURL(rawURL); err != nil {
			// A *url.Error repeats the URL, password included: keep only
			// its cause.
			if ue, ok := errors.AsType[*url.Error](err); ok {
				err = ue.Err
			}
			return nil, nil, fmt.Errorf("coupon: REDIS_URL: %w", err)
		}
	}
	// Let the context deadline bound socket reads, so that ginlimit's
	// per-decision Timeout cuts a slow Redis short with a plain call; without
	// it ginlimit runs each call in a goroutine it can abandon, and a read
	// waits for ReadTimeout (3 s by default). REDIS_URL cannot set this.
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), mini, nil
}

// openCluster makes the client of the Redis Cluster at addrs. It does not
// call Redis, as openRedis.
func openCluster(addrs []string, logger *slog.Logger) redis.UniversalClient {
	logger.Info("coupon: using Redis Cluster", slog.Any("addrs", addrs))
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
}

// Close stops the rate limiter's background work (its subscription to
// resets, see ginlimit.Limiter.Close) and the JWKS refresh, if any, closes
// the Redis client and stops the embedded miniredis, if any. Call it after
// the server has stopped serving Handler. Calls after the first do nothing
// and return the first call's result.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		if a.console != nil {
			_ = a.console.Close() // always nil
		}
		if a.limiter != nil {
			_ = a.limiter.Close() // always nil
		}
		if a.users != nil {
			_ = a.users.Close() // always nil
		}
		if a.rdb != nil {
			if err := a.rdb.Close(); err != nil {
				a.closeErr = fmt.Errorf("coupon: close Redis client: %w", err)
			}
		}
		if a.mini != nil {
			a.mini.Close()
		}
	})
	return a.closeErr
}
