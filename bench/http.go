package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
	"github.com/ginlimit/ginlimit/lua"
)

// httpResult compares one gin route with and without the rate limit
// annotation, served in process.
type httpResult struct {
	// Env names where the decisions come from.
	Env string
	// Bare and Limited are testing.Benchmark's results.
	Bare, Limited testing.BenchmarkResult
	// Non200 counts limited responses that were not 200 (there should be
	// none: the limit is never reached).
	Non200 int64
	// NonDecisions counts limited responses that Redis did not decide
	// (marked, see hdrNonDecision); there should be none.
	NonDecisions int64
	// Reply is the script reply that the canned-reply hook answers with
	// (nil against real Redis): the packed string ginlimit's scripts reply.
	Reply interface{}
	// GoRedis is the go-redis call alone on the canned client (see
	// goRedisCall); zero against real Redis, where it is a round trip.
	GoRedis testing.BenchmarkResult
}

// httpClients is the number of client addresses the requests cycle through:
// the route limits per IP, so each address is one key, as in the decision
// benchmarks.
const httpClients = 1000

// cannedReply is a go-redis hook that answers every script call with reply,
// a real reply of ginlimit's script captured from the harness's Redis (see
// captureReply), without touching the network, so that only the middleware
// and go-redis's client-side code run. The reply's integers are boxed anew
// on every call (a packed string reply is copied), standing in for go-redis
// parsing a real reply. It answers
// anything else with an error, so a command it does not expect shows up (as
// a non-decision).
type cannedReply struct{ reply interface{} }

var errNotScript = errors.New("canned reply: not a script call")

func (cannedReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cannedReply) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { return h.fill(cmd) }
}

func (h cannedReply) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.fill(cmd); err != nil {
				return err
			}
		}
		return nil
	}
}

func (h cannedReply) fill(cmd redis.Cmder) error {
	if s, ok := cmd.(*redis.StringCmd); ok {
		// ginlimit reads a script it knows replies a packed string as one.
		r, ok := h.reply.(string)
		if !ok {
			cmd.SetErr(errNotScript)
			return errNotScript
		}
		s.SetVal(string([]byte(r))) // a new string, as go-redis reads one
		return nil
	}
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		cmd.SetErr(errNotScript)
		return errNotScript
	}
	switch r := h.reply.(type) {
	case string:
		c.SetVal(string([]byte(r))) // a new string, as go-redis reads one
	case []interface{}:
		v := make([]interface{}, len(r))
		for i, x := range r {
			if n, ok := x.(int64); ok {
				x = n // boxed anew
			}
			v[i] = x
		}
		c.SetVal(v)
	default:
		cmd.SetErr(errNotScript)
		return errNotScript
	}
	return nil
}

// captureReply is a go-redis hook that keeps the last reply of a script
// call (an EVALSHA or EVAL answered without an error).
type captureReply struct {
	mu    sync.Mutex
	reply interface{}
}

func (*captureReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *captureReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil {
			switch v := c.Val().(type) {
			case string, []interface{}:
				h.mu.Lock()
				h.reply = v
				h.mu.Unlock()
			}
		}
		return err
	}
}

func (*captureReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// realReply returns the reply of ginlimit's script to the first request of
// the limited engine, from the harness's Redis.
func (e *env) realReply(ctx context.Context) (interface{}, error) {
	rdb := ctxTimeoutClient.newClient(e.srv.Addr)
	defer rdb.Close()
	h := &captureReply{}
	rdb.AddHook(h)
	_, limited, err := engines(rdb, e.cfg.limit, e.cfg.window)
	if err != nil {
		return nil, err
	}
	rec := &reusedRecorder{header: make(http.Header)}
	limited.ServeHTTP(rec, requests()[0])
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reply == nil || rec.header[hdrNonDecision] != nil {
		return nil, fmt.Errorf("no script reply captured (answer %d, %s: %q)", rec.code, hdrNonDecision, rec.header.Get(hdrNonDecision))
	}
	return h.reply, nil
}

// reusedRecorder is a minimal http.ResponseWriter that is reset between
// requests instead of allocated per request, like a reused
// httptest.ResponseRecorder: the benchmark then counts only the server
// side's allocations.
type reusedRecorder struct {
	header http.Header
	code   int
	bytes  int
}

func (r *reusedRecorder) Header() http.Header { return r.header }

func (r *reusedRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.bytes += len(b)
	return len(b), nil
}

func (r *reusedRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *reusedRecorder) reset() {
	clear(r.header)
	r.code, r.bytes = 0, 0
}

var okBody = []byte("ok")

func okHandler(c *gin.Context) { c.Data(http.StatusOK, "text/plain; charset=utf-8", okBody) }

// engines returns the bare engine and the same engine with the route
// guarded by limiter.RateLimit, counting per client IP.
func engines(rdb redis.Scripter, limit int, window time.Duration) (bare, limited *gin.Engine, err error) {
	gin.SetMode(gin.ReleaseMode)
	bare = gin.New()
	bare.GET("/r/:id", okHandler)

	l, err := ginlimit.New(ginlimit.Redis(rdb))
	if err != nil {
		return nil, nil, err
	}
	limited = gin.New()
	limited.GET("/r/:id", l.RateLimit(
		ginlimit.Key("bench:http:"), ginlimit.Window(window), ginlimit.Limit(limit),
		ginlimit.Type(ginlimit.IP), ginlimit.Respond(markNonDecision)), markAdmitted, okHandler)
	return bare, limited, nil
}

// clientAddrs returns the httpClients client addresses of the HTTP
// benchmarks, 10.0.0.0 to 10.0.3.231.
func clientAddrs() []string {
	addrs := make([]string, httpClients)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
	}
	return addrs
}

// requests returns httpClients GET requests, each from its own address.
func requests() []*http.Request {
	reqs := make([]*http.Request, httpClients)
	for i, addr := range clientAddrs() {
		r := httptest.NewRequest(http.MethodGet, "/r/"+strconv.Itoa(i), nil)
		r.RemoteAddr = addr + ":40000"
		reqs[i] = r
	}
	return reqs
}

// serve benchmarks h over reqs with testing.Benchmark and counts non-200s
// and responses marked as non-decisions (see hdrNonDecision).
func serve(h http.Handler, reqs []*http.Request) (res testing.BenchmarkResult, non200, nonDecisions int64) {
	rec := &reusedRecorder{header: make(http.Header)}
	res = testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			rec.reset()
			h.ServeHTTP(rec, reqs[i%len(reqs)])
			if rec.code != http.StatusOK {
				non200++
			}
			if rec.header[hdrNonDecision] != nil {
				nonDecisions++
			}
		}
	})
	return res, non200, nonDecisions
}

// benchHTTP measures the middleware's overhead per request: against the
// harness's Redis when canned is false, and with the canned-reply hook (no
// Redis, no network) when it is true.
func (e *env) benchHTTP(ctx context.Context, canned bool) (httpResult, error) {
	if err := e.admin.FlushDB(ctx).Err(); err != nil {
		return httpResult{}, fmt.Errorf("FLUSHDB: %w", err)
	}
	rdb := ctxTimeoutClient.newClient(e.srv.Addr)
	defer rdb.Close()
	res := httpResult{Env: "real Redis (one round trip per request)"}
	if canned {
		reply, err := e.realReply(ctx)
		if err != nil {
			return httpResult{}, err
		}
		rdb.AddHook(cannedReply{reply})
		res.Env = "excluding Redis (go-redis hook returns a canned reply)"
		res.Reply = reply
	}
	bare, limited, err := engines(rdb, e.cfg.limit, e.cfg.window)
	if err != nil {
		return httpResult{}, err
	}
	reqs := requests()

	// One request each, checked, before measuring.
	for _, c := range []struct {
		name    string
		h       http.Handler
		counted bool
	}{{"bare", bare, false}, {"limited", limited, true}} {
		rec := &reusedRecorder{header: make(http.Header)}
		c.h.ServeHTTP(rec, reqs[0])
		if rec.code != http.StatusOK {
			return httpResult{}, fmt.Errorf("%s engine answered %d, want 200", c.name, rec.code)
		}
		if got := rec.header.Get("X-RateLimit-Remaining"); c.counted && (got == "" || rec.header[hdrNonDecision] != nil) {
			return httpResult{}, fmt.Errorf("%s engine: Redis did not decide (X-RateLimit-Remaining %q, %s %q) (%s)",
				c.name, got, hdrNonDecision, rec.header.Get(hdrNonDecision), res.Env)
		}
	}

	res.Bare, _, _ = serve(bare, reqs)
	res.Limited, res.Non200, res.NonDecisions = serve(limited, reqs)
	if canned {
		if res.GoRedis, err = goRedisCall(rdb, e.cfg.limit, e.cfg.window); err != nil {
			return httpResult{}, err
		}
	}
	return res, nil
}

// goRedisCall benchmarks the go-redis share of one limited request: the
// call the middleware makes for its rule (Script.Run of the rule's script
// with a key of the route's shape and the arguments ginlimit sends, then
// Result), on the same client, so with the same canned reply and its copy.
// The keys are built beforehand: building them is ginlimit's work, as is
// decoding the reply, which is left out.
func goRedisCall(rdb *redis.Client, limit int, window time.Duration) (testing.BenchmarkResult, error) {
	script := redis.NewScript(lua.Single(string(ginlimit.SlidingLog), window.Microseconds(), int64(limit), 0))
	keys := make([][]string, httpClients)
	for i, addr := range clientAddrs() {
		keys[i] = []string{"bench:http:sl:{GET /r/:id ip:" + addr + "}"}
	}
	args := []any{"", 1}
	ctx := context.Background()
	var failed error
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := script.Run(ctx, rdb, keys[i%len(keys)], args...).Result(); err != nil && failed == nil {
				failed = err
			}
		}
	})
	if failed != nil {
		return res, fmt.Errorf("the go-redis call alone: %w", failed)
	}
	return res, nil
}

// The end-to-end comparison: the same gin route served over loopback TCP by
// net/http, bare, behind ginlimit and behind a redis_rate middleware written
// by hand, driven by HTTP clients in this process. Every request comes from
// 127.0.0.1, a trusted proxy, with X-Forwarded-For naming one of
// httpClients client addresses, so each route counts per client address, as
// the decision cases count per key.

// trustedProxy is the peer address of every end-to-end request.
const trustedProxy = "127.0.0.1"

// hdrNonDecision is the response header set on a response that Redis did
// not decide (the FailLocal fallback did, or saturation refused it), so the
// client can count it as a non-decision; its value is "saturated" for
// ErrSaturated and "error" otherwise. markNonDecision sets it on a 429
// (through Respond), markAdmitted on an admission, and saturationWriter on
// ginlimit's 503, which the defaults (FailLocal) answer for saturation
// alone.
const hdrNonDecision = "X-Bench-Non-Decision"

// e2eRoute is one route of the end-to-end comparison.
type e2eRoute struct {
	// Case gives the route's ID, name and Redis client kind in the report.
	Case *benchCase
	// NoRedis marks the bare route, which uses no client.
	NoRedis bool
	// Limit returns the route's rate limit handler on rdb, or nil for none.
	Limit func(rdb *redis.Client, limit int, window time.Duration) (gin.HandlerFunc, error)
	// Prefix is the start of the route's Redis keys, to check that it counts
	// per client address ("" for the bare route).
	Prefix string
}

// e2eRoutes lists the routes of the end-to-end comparison in report order.
func e2eRoutes() []e2eRoute {
	return []e2eRoute{
		{
			Case:    &benchCase{ID: "http-bare", Name: "bare gin route", Algorithm: "none"},
			NoRedis: true,
			Limit:   func(*redis.Client, int, time.Duration) (gin.HandlerFunc, error) { return nil, nil },
		},
		{
			Case:   &benchCase{ID: "http-redis_rate", Name: "redis_rate middleware (by hand)", Algorithm: "GCRA, one string per key"},
			Limit:  redisRateHandler,
			Prefix: "rate:e2e:",
		},
		{
			Case:   &benchCase{ID: "http-ginlimit-plain", Name: "ginlimit RateLimit, defaults, plain client", Algorithm: "sliding log", Client: plainClient},
			Limit:  ginlimitHandler("bench-e2e-plain:"),
			Prefix: "bench-e2e-plain:",
		},
		{
			Case:   &benchCase{ID: "http-ginlimit", Name: "ginlimit RateLimit, defaults, ContextTimeoutEnabled client", Algorithm: "sliding log"},
			Limit:  ginlimitHandler("bench-e2e:"),
			Prefix: "bench-e2e:",
		},
	}
}

// redisRateHandler is the middleware an application writes around
// redis_rate: one Allow per request, keyed by gin's ClientIP (which trusts
// X-Forwarded-For from trustedProxy only, see e2eEngine), 429 when not
// allowed, 500 on an error. The limit is redis_rate.PerSecond(limit) (its
// Limit{Rate, Burst, Period} for a -window other than 1s).
func redisRateHandler(rdb *redis.Client, limit int, window time.Duration) (gin.HandlerFunc, error) {
	l := redis_rate.NewLimiter(rdb)
	lim := redis_rate.PerSecond(limit)
	if window != time.Second {
		lim = redis_rate.Limit{Rate: limit, Burst: limit, Period: window}
	}
	return func(c *gin.Context) {
		res, err := l.Allow(c.Request.Context(), "e2e:"+c.ClientIP(), lim)
		if err != nil {
			c.AbortWithStatus(http.StatusInternalServerError)
			return
		}
		if res.Allowed == 0 {
			c.AbortWithStatus(http.StatusTooManyRequests)
			return
		}
		c.Next()
	}, nil
}

// ginlimitHandler returns ginlimit's handler of the route: a Limiter with
// nothing but Redis(rdb), and limiter.RateLimit with the key prefix, window
// and limit, counted per client IP behind trustedProxy, marking a
// non-decision (hdrNonDecision).
func ginlimitHandler(prefix string) func(*redis.Client, int, time.Duration) (gin.HandlerFunc, error) {
	return func(rdb *redis.Client, limit int, window time.Duration) (gin.HandlerFunc, error) {
		l, err := ginlimit.New(ginlimit.Redis(rdb))
		if err != nil {
			return nil, err
		}
		ip, err := identity.NewIP(trustedProxy)
		if err != nil {
			return nil, err
		}
		rl := l.RateLimit(ginlimit.Key(prefix), ginlimit.Window(window), ginlimit.Limit(limit),
			ginlimit.Type(ginlimit.IP), ginlimit.IPIdentity(ip), ginlimit.Respond(markNonDecision))
		return func(c *gin.Context) {
			w := c.Writer
			c.Writer = saturationWriter{w}
			rl(c)
			c.Writer = w
			if !c.IsAborted() {
				markAdmitted(c)
			}
		}, nil
	}
}

// markNonDecision, given to Respond, marks a 429 that Redis did not decide
// and writes nothing, so ginlimit writes its own body.
func markNonDecision(c *gin.Context, d ginlimit.Decision) {
	switch {
	case errors.Is(d.Err, ginlimit.ErrSaturated):
		c.Header(hdrNonDecision, "saturated")
	case d.Err != nil:
		c.Header(hdrNonDecision, "error")
	}
}

// markAdmitted, a handler after the limit, marks an admission that Redis
// did not decide.
func markAdmitted(c *gin.Context) {
	if d, ok := ginlimit.DecisionFrom(c); ok {
		markNonDecision(c, d)
	}
}

// saturationWriter marks ginlimit's 503, which the defaults (FailLocal)
// answer for saturation alone, as it is written.
type saturationWriter struct{ gin.ResponseWriter }

func (w saturationWriter) WriteHeader(code int) {
	if code == http.StatusServiceUnavailable {
		w.Header().Set(hdrNonDecision, "saturated")
	}
	w.ResponseWriter.WriteHeader(code)
}

// e2eEngine returns a gin engine (ReleaseMode, gin.New()) that trusts
// X-Forwarded-For from trustedProxy only, with GET /r/:id behind limit
// (when not nil).
func e2eEngine(limit gin.HandlerFunc) (*gin.Engine, error) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if err := r.SetTrustedProxies([]string{trustedProxy}); err != nil {
		return nil, err
	}
	if limit != nil {
		r.GET("/r/:id", limit, okHandler)
	} else {
		r.GET("/r/:id", okHandler)
	}
	return r, nil
}

// httpDecider returns a decider that sends GET url with X-Forwarded-For key
// and reads the whole answer: 200 is admitted, 429 rejected, and anything
// else, a transport error or a response that hdrNonDecision marks is a
// non-decision.
func httpDecider(client *http.Client, url string) decider {
	return func(ctx context.Context, key string) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Header["X-Forwarded-For"] = []string{key}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch v := resp.Header.Get(hdrNonDecision); {
		case err != nil:
			return false, err
		case v == "saturated":
			return false, fmt.Errorf("HTTP %d from ginlimit's fallback: %w", resp.StatusCode, ginlimit.ErrSaturated)
		case v != "":
			return false, fmt.Errorf("HTTP %d from ginlimit's fallback: Redis did not decide", resp.StatusCode)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
}

// measureEndToEnd serves each route of e2eRoutes on a loopback listener of
// its own and measures them, interleaved like the decision cases, at each
// -http-callers concurrency, with FLUSHDB before each. Each route's clients
// share one http.Transport with keep-alive connections, one per caller.
func (e *env) measureEndToEnd(ctx context.Context) ([]cellResult, error) {
	routes := e2eRoutes()
	addrs := clientAddrs()
	maxCallers := slicesMax(e.cfg.httpCallers)
	cases := make([]*benchCase, len(routes))
	deciders := make([]decider, len(routes))
	for i, rt := range routes {
		var limit gin.HandlerFunc
		if !rt.NoRedis {
			rdb := rt.Case.Client.newClient(e.srv.Addr)
			defer rdb.Close()
			var err error
			if limit, err = rt.Limit(rdb, e.cfg.limit, e.cfg.window); err != nil {
				return nil, fmt.Errorf("%s: %w", rt.Case.ID, err)
			}
		}
		engine, err := e2eEngine(limit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rt.Case.ID, err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(trustedProxy, "0"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rt.Case.ID, err)
		}
		srv := &http.Server{Handler: engine, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: maxCallers, DisableCompression: true}
		defer tr.CloseIdleConnections()
		cases[i] = rt.Case
		deciders[i] = httpDecider(&http.Client{Transport: tr}, "http://"+ln.Addr().String()+"/r/1")
	}

	var cells []cellResult
	for _, n := range e.cfg.httpCallers {
		if err := e.admin.FlushDB(ctx).Err(); err != nil {
			return nil, fmt.Errorf("FLUSHDB: %w", err)
		}
		if err := e.checkEndToEnd(ctx, routes, deciders, addrs[0]); err != nil {
			return nil, err
		}
		level, err := e.interleave(ctx, cases, deciders, n, addrs)
		if err != nil {
			return nil, fmt.Errorf("%d clients: %w", n, err)
		}
		for _, c := range level {
			progress("%-25s %4d clients: %8.0f req/s, p50 %8.1f µs, %d non-decisions, CPU process/redis/others %v",
				c.Case.ID, n, c.Run.PerSec(), us(c.Run.Hist.quantile(0.5)), c.Run.NonDecisions, c.CPU.use())
		}
		cells = append(cells, level...)
	}
	return cells, nil
}

// checkEndToEnd sends one request from addr to each route and checks that it
// was admitted and that each limited route then has exactly one key of its
// prefix, which names addr: the route counts per X-Forwarded-For address.
func (e *env) checkEndToEnd(ctx context.Context, routes []e2eRoute, deciders []decider, addr string) error {
	for i, rt := range routes {
		ok, err := deciders[i](ctx, addr)
		if err != nil || !ok {
			return fmt.Errorf("%s: first request: admitted %v, error %v; want admitted", rt.Case.ID, ok, err)
		}
		if rt.Prefix == "" {
			continue
		}
		keys, err := e.admin.Keys(ctx, rt.Prefix+"*").Result()
		if err != nil {
			return fmt.Errorf("KEYS: %w", err)
		}
		if len(keys) != 1 || !strings.Contains(keys[0], addr) {
			return fmt.Errorf("%s: after one request from %s, the keys %s* are %q; want one that names the address", rt.Case.ID, addr, rt.Prefix, keys)
		}
	}
	return nil
}
