package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// DevJWTSecret is the HMAC secret that [New] uses when [Config.JWTSecret] is
// empty, so that the demo runs with no setup. It is published here, so any
// token it signs can be forged: never use it outside development.
const DevJWTSecret = "ginlimit-coupon-demo-development-secret-NOT-FOR-PRODUCTION"

// Config configures [New]. The zero value runs the demo on an embedded
// miniredis with [DevJWTSecret] and the sliding log, trusting no proxy and
// logging to slog.Default().
type Config struct {
	// RedisURL is the Redis server to count requests in, in the form
	// redis.ParseURL accepts ("redis://user:pass@host:6379/0",
	// "rediss://...", "unix:///path"). When it is empty, New starts an
	// in-process miniredis on 127.0.0.1 and App.Close stops it.
	RedisURL string
	// JWTSecret is the HS256 secret that signs the tokens of POST /api/login
	// and verifies them on User-limited routes. It must be at least 32 bytes.
	// When it is empty, New uses DevJWTSecret and logs a warning.
	JWTSecret []byte
	// IdentitySecret keys the HMAC that every limited route puts in its
	// Redis keys in place of the client IP or user id
	// (ginlimit.HashIdentities); it must be at least 32 bytes. Give every
	// instance on one Redis the same secret, and keep it across restarts:
	// the counts are found by it. When it is empty, New makes a random one
	// and logs that it did (a warning unless Redis is the embedded
	// miniredis, whose counts are lost on exit anyway).
	IdentitySecret []byte
	// JWKSURL, when not empty, is the URL of the JSON Web Key Set of an
	// identity provider: besides the HS256 tokens of JWTSecret, RS256 and
	// ES256 tokens signed by a key of that set are accepted. It must be
	// https, or http to a loopback host (localhost, 127.0.0.0/8, ::1). New
	// waits at most 5 s for the set; a provider that is down does not stop
	// the demo, whose RS256/ES256 tokens then get 401 until the set arrives
	// (see Tokens in the package doc).
	JWKSURL string
	// TrustedProxies are the proxies whose X-Forwarded-For is believed when
	// finding the client IP of IP-limited routes, each a CIDR ("10.0.0.0/8")
	// or a single address. When it is empty, the client is the TCP peer and
	// X-Forwarded-For is ignored.
	TrustedProxies []string
	// Algorithm is the rate limiting algorithm of every limited route. The
	// routes keep their windows and limits whatever it is; what changes is
	// how strictly "limit per window" holds (see package ginlimit):
	// ginlimit.SlidingLog (the default, which the zero value stands for) admits at most the
	// limit in any window's length; ginlimit.SlidingCounter, with
	// ginlimit.DefaultSubWindows sub-windows, about the limit in steady
	// traffic but up to twice it in the worst case (a burst at the end of
	// one sub-window and another a window later); ginlimit.FixedWindow up
	// to twice the limit across a window boundary; and ginlimit.TokenBucket
	// refills limit tokens per window into a bucket of limit tokens (its
	// burst), so up to twice the limit after a quiet spell. New rejects a
	// value outside these four.
	Algorithm ginlimit.AlgorithmKind
	// ClusterAddrs, when not empty, are seed addresses of a Redis Cluster
	// ("10.0.0.1:6379"); New then uses a cluster client and ignores RedisURL.
	ClusterAddrs []string
	// FailPolicy is what limited routes do while Redis fails:
	// ginlimit.FailLocal (ginlimit's default, which the zero value stands for), ginlimit.FailOpen or
	// ginlimit.FailClosed.
	FailPolicy ginlimit.FailPolicy
	// Shadow turns on shadow mode for every limited route: decisions and
	// headers as usual, but nothing is ever refused.
	Shadow bool
	// Logger receives the start-up messages, one line per request, and the
	// rate limiter's errors. When it is nil, slog.Default() is used.
	Logger *slog.Logger
	// DecisionTimeout bounds each rate limit decision's Redis call. When it
	// is zero, ginlimit.DefaultTimeout (250 ms) is used. Tests raise it so
	// that a loaded machine never turns a slow answer into a fail-open.
	DecisionTimeout time.Duration
	// WriteOrder stands for writing an order to the database in GET
	// /api/coupon/seckill/order. When it is nil, it waits OrderWriteTime
	// (or until the request ends). Tests give one that waits for them, so
	// that they know which requests hold a slot without timing anything.
	WriteOrder func(ctx context.Context)
}

// ConfigFromEnv reads a Config from the environment through getenv (pass
// os.Getenv):
//
//   - REDIS_URL becomes RedisURL;
//   - REDIS_CLUSTER_ADDRS (comma-separated) becomes ClusterAddrs;
//   - FAIL_POLICY (local, open or closed; default local) becomes FailPolicy;
//   - SHADOW=1 becomes Shadow;
//   - JWT_SECRET becomes JWTSecret, left nil when the variable is unset or
//     empty;
//   - IDENTITY_SECRET becomes IdentitySecret, left nil the same way;
//   - JWKS_URL becomes JWKSURL; when set it must be an absolute http or
//     https URL with a host;
//   - TRUSTED_PROXIES, a comma-separated list of CIDRs or addresses, becomes
//     TrustedProxies, with spaces trimmed and blank entries ignored;
//   - LIMIT_ALGORITHM, one of sliding_log, sliding_counter, fixed_window or
//     token_bucket (the values of ginlimit.AlgorithmKind), becomes Algorithm;
//     unset or blank means sliding_log.
//
// Logger is left nil. ConfigFromEnv checks the values it must parse
// (LIMIT_ALGORITHM, FAIL_POLICY, SHADOW) and the form of JWKS_URL, so that
// a typo there is an error that names the variable rather than a key set
// that never loads; an error never repeats a URL's password. Everything
// else, and the rest of JWKS_URL's rules (which hosts may use http), is
// validated by [New].
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{RedisURL: strings.TrimSpace(getenv("REDIS_URL"))}
	if s := getenv("JWT_SECRET"); s != "" {
		cfg.JWTSecret = []byte(s)
	}
	if s := getenv("IDENTITY_SECRET"); s != "" {
		cfg.IdentitySecret = []byte(s)
	}
	if s := strings.TrimSpace(getenv("JWKS_URL")); s != "" {
		if err := checkJWKSURL(s); err != nil {
			return Config{}, fmt.Errorf("coupon: JWKS_URL: %w", err)
		}
		cfg.JWKSURL = s
	}
	for p := range strings.SplitSeq(getenv("TRUSTED_PROXIES"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.TrustedProxies = append(cfg.TrustedProxies, p)
		}
	}
	for a := range strings.SplitSeq(getenv("REDIS_CLUSTER_ADDRS"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.ClusterAddrs = append(cfg.ClusterAddrs, a)
		}
	}
	switch s := strings.TrimSpace(getenv("FAIL_POLICY")); s {
	case "", "local":
		cfg.FailPolicy = ginlimit.FailLocal
	case "open":
		cfg.FailPolicy = ginlimit.FailOpen
	case "closed":
		cfg.FailPolicy = ginlimit.FailClosed
	default:
		return Config{}, fmt.Errorf("coupon: FAIL_POLICY: %q: want local, open or closed", s)
	}
	switch s := strings.TrimSpace(getenv("SHADOW")); s {
	case "", "0", "false":
	case "1", "true":
		cfg.Shadow = true
	default:
		return Config{}, fmt.Errorf("coupon: SHADOW: %q: want 1 or 0", s)
	}
	if s := strings.TrimSpace(getenv("LIMIT_ALGORITHM")); s != "" {
		a := ginlimit.AlgorithmKind(s)
		if err := checkAlgorithm(a); err != nil {
			return Config{}, fmt.Errorf("coupon: LIMIT_ALGORITHM: %w", err)
		}
		cfg.Algorithm = a
	}
	return cfg, nil
}

// identitySecretLen is the length of the identity secret New makes when
// none is configured, and the least it accepts: ginlimit.HashIdentities's.
const identitySecretLen = 32

// identitySecret returns cfg.IdentitySecret, checked, or, when it is empty,
// a random secret made now, and logs that it did.
func identitySecret(cfg Config, logger *slog.Logger) ([]byte, error) {
	if len(cfg.IdentitySecret) > 0 {
		if len(cfg.IdentitySecret) < identitySecretLen {
			return nil, fmt.Errorf("coupon: IdentitySecret (IDENTITY_SECRET): %d bytes, want at least %d", len(cfg.IdentitySecret), identitySecretLen)
		}
		return cfg.IdentitySecret, nil
	}
	secret := make([]byte, identitySecretLen)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	level := slog.LevelWarn
	if cfg.RedisURL == "" && len(cfg.ClusterAddrs) == 0 {
		level = slog.LevelInfo // the embedded miniredis forgets the counts on exit anyway
	}
	logger.Log(context.Background(), level, "coupon: IDENTITY_SECRET is not set; hashing identities in Redis keys with a random secret made at start-up: counts start afresh on every restart and are not shared with other instances")
	return secret, nil
}

// checkAlgorithm checks that a names one of ginlimit's algorithms.
func checkAlgorithm(a ginlimit.AlgorithmKind) error {
	switch a {
	case ginlimit.SlidingLog, ginlimit.SlidingCounter, ginlimit.FixedWindow, ginlimit.TokenBucket:
		return nil
	}
	return fmt.Errorf("unknown algorithm %q: want sliding_log, sliding_counter, fixed_window or token_bucket", string(a))
}

// checkJWKSURL checks that rawURL is an absolute http or https URL with a
// host. Its errors never repeat the URL, which may hold a password.
func checkJWKSURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A *url.Error repeats the URL: keep only its cause.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q: want https (or http to a loopback host)", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return errors.New("no host")
	}
	return nil
}
