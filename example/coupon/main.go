// Command coupon serves the ginlimit coupon demo (see package app for its
// routes and limits).
//
// It is configured by the environment:
//
//	ADDR             listen address; default ":8080"
//	REDIS_URL        e.g. redis://localhost:6379/0; unset starts an embedded miniredis
//	JWT_SECRET       HS256 secret of at least 32 bytes; unset uses app.DevJWTSecret (insecure)
//	IDENTITY_SECRET  at least 32 bytes keying the HMAC of identities in Redis keys; unset makes a random one
//	FAIL_POLICY      local (default), open or closed: what limited routes do while Redis fails
//	JWKS_URL         an identity provider's JWKS; RS256/ES256 tokens signed by its keys are accepted too
//	TRUSTED_PROXIES  comma-separated CIDRs whose X-Forwarded-For is believed
//	LIMIT_ALGORITHM  sliding_log (default), sliding_counter, fixed_window or token_bucket
//	GIN_MODE         gin's mode; default "release"
//
// It logs in one format, slog's text handler on stderr: its own lines,
// ginlimit's, go-redis's, the standard log package's and gin's debug
// output all go through it. It starts and serves while Redis is down
// (see package app).
//
// SIGINT or SIGTERM shuts it down gracefully: in-flight requests get up to
// ten seconds to finish, then the app is closed (the rate limiter's reset
// subscription, the JWKS refresh, the Redis client, the embedded miniredis).
//
// With the subcommand "token" it serves nothing: it prints a token signed
// with JWT_SECRET (or app.DevJWTSecret) and exits, so that whoever holds the
// secret can mint the admin and vip tokens that POST /api/login never gives:
//
//	coupon token [-role admin] [-plan vip] USER_ID
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/example/coupon/app"
)

const shutdownTimeout = 10 * time.Second

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	useLogger(logger)
	if len(os.Args) > 1 && os.Args[1] == "token" {
		if err := token(os.Args[2:], os.Getenv, os.Stdout, logger); err != nil {
			logger.Error("coupon token: exiting", slog.String("error", err.Error()))
			os.Exit(2)
		}
		return
	}
	if err := run(logger); err != nil {
		logger.Error("coupon: exiting", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

func run(logger *slog.Logger) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if os.Getenv(gin.EnvGinMode) == "" {
		gin.SetMode(gin.ReleaseMode)
	}
	cfg, err := app.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close()) }()

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8080"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("coupon: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           a.Handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("coupon: listening", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-served:
		return fmt.Errorf("coupon: serve: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process at once
	logger.Info("coupon: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("coupon: shutdown: %w", err)
	}
	return nil
}

// useLogger sends the log lines of every library the command uses through
// l's handler, so that it writes one format: ginlimit logs to
// slog.Default, which slog.SetDefault also makes the standard log
// package's destination; go-redis and gin have loggers of their own.
// These are process-wide settings, so the command makes them, not
// package app.
func useLogger(l *slog.Logger) {
	slog.SetDefault(l)
	redis.SetLogger(redisLogger{l})
	gin.DebugPrintFunc = func(format string, values ...any) {
		l.Info("gin: " + strings.TrimSpace(fmt.Sprintf(format, values...)))
	}
	gin.DefaultWriter = slog.NewLogLogger(l.Handler(), slog.LevelInfo).Writer()
	gin.DefaultErrorWriter = slog.NewLogLogger(l.Handler(), slog.LevelError).Writer()
}

// redisLogger is go-redis's logger on an slog.Logger: go-redis logs what
// goes wrong with connections (a dial that fails, say), as warnings.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// token prints, on out, a token for the user named in args, signed with the
// JWT_SECRET that getenv gives (the server's secret) or, when it is unset,
// with app.DevJWTSecret, and with the role of the -role flag and the plan of
// the -plan flag, if any.
func token(args []string, getenv func(string) string, out io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("coupon token", flag.ContinueOnError)
	role := fs.String("role", "", `the token's "role" claim; "`+app.AdminRole+`" for the admin API`)
	plan := fs.String("plan", "", `the token's "plan" claim; "`+app.PlanVIP+`" for the claim route's higher limit`)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: coupon token [-role %s] [-plan %s] USER_ID\n", app.AdminRole, app.PlanVIP)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want exactly one user id")
	}
	secret := []byte(getenv("JWT_SECRET"))
	if len(secret) == 0 {
		logger.Warn("coupon token: JWT_SECRET is not set; signing with the built-in development secret, which is public and insecure")
		secret = []byte(app.DevJWTSecret)
	}
	tok, err := app.NewToken(secret, fs.Arg(0), app.Grants{Role: *role, Plan: *plan}, time.Now())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, tok)
	return err
}
