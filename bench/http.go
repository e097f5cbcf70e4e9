package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
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
}

// httpClients is the number of client addresses the requests cycle through:
// the route limits per IP, so each address is one key, as in the decision
// benchmarks.
const httpClients = 1000

// cannedReply is a go-redis hook that answers every script call with a
// fixed sliding-log reply of the five elements every ginlimit script returns,
// {allowed 1, remaining 5, reset 1 s, now, retry 0}, without touching the
// network, so that only the middleware and go-redis's client-side code run. It answers anything else with an error, so a
// command it does not expect shows up (as a missing X-RateLimit-Remaining).
type cannedReply struct{}

var errNotScript = errors.New("canned reply: not a script call")

func (cannedReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (cannedReply) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { return fill(cmd) }
}

func (cannedReply) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := fill(cmd); err != nil {
				return err
			}
		}
		return nil
	}
}

func fill(cmd redis.Cmder) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		cmd.SetErr(errNotScript)
		return errNotScript
	}
	c.SetVal([]interface{}{int64(1), int64(5), int64(1000000), int64(time.Now().UnixMicro()), int64(0)})
	return nil
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
// guarded by ginlimit.RateLimit, counting per client IP.
func engines(rdb redis.Scripter, limit int, window time.Duration) (bare, limited *gin.Engine, err error) {
	gin.SetMode(gin.ReleaseMode)
	bare = gin.New()
	bare.GET("/r/:id", okHandler)

	l, err := ginlimit.New(ginlimit.Redis(rdb))
	if err != nil {
		return nil, nil, err
	}
	limited = gin.New()
	limited.Use(l.Middleware())
	limited.GET("/r/:id", ginlimit.RateLimit(
		ginlimit.Key("bench:http:"), ginlimit.Window(window), ginlimit.Limit(limit),
		ginlimit.Type(ginlimit.IP)), okHandler)
	return bare, limited, nil
}

// requests returns httpClients GET requests, each from its own address.
func requests() []*http.Request {
	reqs := make([]*http.Request, httpClients)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodGet, "/r/"+strconv.Itoa(i), nil)
		r.RemoteAddr = fmt.Sprintf("10.0.%d.%d:40000", i/256, i%256)
		reqs[i] = r
	}
	return reqs
}

// serve benchmarks h over reqs with testing.Benchmark and counts non-200s.
func serve(h http.Handler, reqs []*http.Request) (testing.BenchmarkResult, int64) {
	var non200 int64
	rec := &reusedRecorder{header: make(http.Header)}
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			rec.reset()
			h.ServeHTTP(rec, reqs[i%len(reqs)])
			if rec.code != http.StatusOK {
				non200++
			}
		}
	})
	return res, non200
}

// benchHTTP measures the middleware's overhead per request: against the
// harness's Redis when canned is false, and with the canned-reply hook (no
// Redis, no network) when it is true.
func (e *env) benchHTTP(ctx context.Context, canned bool) (httpResult, error) {
	if err := e.admin.FlushDB(ctx).Err(); err != nil {
		return httpResult{}, fmt.Errorf("FLUSHDB: %w", err)
	}
	rdb := newClient(e.srv.Addr)
	defer rdb.Close()
	res := httpResult{Env: "real Redis (one round trip per request)"}
	if canned {
		rdb.AddHook(cannedReply{})
		res.Env = "excluding Redis (go-redis hook returns a canned reply)"
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
		if got := rec.header.Get("X-RateLimit-Remaining"); c.counted && got == "" {
			return httpResult{}, fmt.Errorf("%s engine: no X-RateLimit-Remaining header: Redis did not decide (%s)", c.name, res.Env)
		}
	}

	res.Bare, _ = serve(bare, reqs)
	res.Limited, res.Non200 = serve(limited, reqs)
	return res, nil
}
