package ginlimit

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/lua"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// benchLimit is the benchmarks' limit: the sliding log's largest, and more
// than any benchmark's run spends on one key.
const benchLimit = 100_000

// cannedReply is a go-redis hook that answers every command with an
// admitting single-rule reply and sends nothing: it leaves only the client's
// and the middleware's own work in a benchmark. The reply is what the
// script sends, its integers packed in a string, made anew for each
// command as go-redis reads a real one.
type cannedReply struct{}

func (cannedReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (cannedReply) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		var b [6 * 8]byte
		for i, v := range [6]int64{time.Now().UnixMicro(), 0, 1, 5, 1_000_000, 0} {
			binary.BigEndian.PutUint64(b[8*i:], uint64(v))
		}
		switch c := cmd.(type) {
		case *redis.Cmd:
			c.SetVal(string(b[:]))
		case *redis.StringCmd:
			c.SetVal(string(b[:]))
		}
		return nil
	}
}

func (cannedReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func cannedClient(b *testing.B) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	c.AddHook(cannedReply{})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func serveLoop(b *testing.B, e *gin.Engine, target string, limited bool) {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	req.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		clear(w.Header())
		w.Body.Reset()
		e.ServeHTTP(w, req)
		if w.Code != http.StatusOK || (limited && w.Header().Get("X-Ratelimit-Remaining") == "") {
			b.Fatalf("status %d, headers %v: the decision did not come from the (canned) script", w.Code, w.Header())
		}
	}
}

// BenchmarkMiddleware compares a bare route with the same route behind
// RateLimit on a client whose replies are canned: the difference is the
// middleware's cost per request, Redis and the network excluded. "go-redis
// call" is the client's share of it alone (the EVALSHA of the rule's
// script as the engine sends it, a command whose string reply go-redis
// reads as a string, on the same canned client, its arguments built
// beforehand): ginlimit's own cost is limited - bare - go-redis call. One
// caller, one key.
func BenchmarkMiddleware(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	b.Run("go-redis call", func(b *testing.B) {
		c := cannedClient(b)
		s := redis.NewScript(lua.Single(string(SlidingLog), time.Second.Microseconds(), benchLimit, int64(len("rate_limit:"))))
		args := []any{"evalsha", s.Hash(), 1, "rate_limit:sl2:{GET /r/:id ip:192.0.2.1}", "", 1}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			cmd := redis.NewStringCmd(ctx, args...)
			cmd.SetFirstKeyPos(3)
			if err := c.Process(ctx, cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name string
		typ  Dimension
	}{{"Method", Method}, {"IP", IP}} {
		b.Run("bare/"+tc.name, func(b *testing.B) {
			e := gin.New()
			e.GET("/r/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
			serveLoop(b, e, "/r/1", false)
		})
		b.Run("limited/"+tc.name, func(b *testing.B) {
			e := gin.New()
			e.GET("/r/:id", testLimit(Redis(cannedClient(b)), Type(tc.typ), Limit(benchLimit)), func(c *gin.Context) { c.Status(http.StatusOK) })
			serveLoop(b, e, "/r/1", true)
		})
	}
}

// BenchmarkAllowRealRedis is one decision on a real redis-server, with and
// without auto-pipelining, at the benchmark's parallelism over 1,000 keys.
func BenchmarkAllowRealRedis(b *testing.B) {
	srv := redistest.Start(b)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		{"autopipeline", []Option{autoPipeline(true)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			opts := append([]Option{Redis(c), Key("bench:" + tc.name + ":"), Window(time.Second), Limit(benchLimit), DenyCache(0)}, tc.opts...)
			p := mustPolicy(b, opts...)
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := p.Allow(context.Background(), keys[i%len(keys)], 1); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkMiddlewareRealRedis is a limited gin route served in process
// (httptest) with ginlimit's defaults through a real go-redis client and a
// real redis-server, 16 parallel callers per CPU over 1,000 client IPs.
// Beside it, "go-redis EVALSHA" is the go-redis call alone (the same script
// and arguments on the same kind of client, at the same parallelism), and
// "bare route" the route without ginlimit: the middleware's own cost is
// the limited time minus those two. It leaves out the network (loopback
// only) and HTTP parsing (httptest).
func BenchmarkMiddlewareRealRedis(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	srv := redistest.Start(b)
	ips := make([]string, 1000)
	for i := range ips {
		ips[i] = "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + ":1234"
	}
	serve := func(b *testing.B, e *gin.Engine) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.ResetTimer()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest(http.MethodGet, "/r/1", nil)
			w := httptest.NewRecorder()
			for pb.Next() {
				req.RemoteAddr = ips[n.Add(1)%int64(len(ips))]
				clear(w.Header())
				w.Body.Reset()
				e.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Errorf("status %d", w.Code)
					return
				}
			}
		})
	}
	b.Run("bare route", func(b *testing.B) {
		e := gin.New()
		e.GET("/r/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
		serve(b, e)
	})
	b.Run("limited route", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		b.Cleanup(func() { _ = c.Close() })
		l, err := New(Redis(c), Key("bench:mw:"), Type(IP), Limit(benchLimit), Window(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		e := gin.New()
		e.GET("/r/:id", l.RateLimit(), func(c *gin.Context) {
			if d, _ := DecisionFrom(c); d.Err != nil || d.Local {
				b.Errorf("not decided by Redis: %+v", d)
			}
			c.Status(http.StatusOK)
		})
		serve(b, e)
	})
	b.Run("go-redis EVALSHA", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		b.Cleanup(func() { _ = c.Close() })
		// The route's script and key shape: its param is the length of the
		// prefix before the sl2: tag.
		s := redis.NewScript(lua.Single(string(SlidingLog), time.Hour.Microseconds(), benchLimit, int64(len("bench:evalsha:"))))
		args := []any{"", 1}
		b.ReportAllocs()
		b.SetParallelism(16)
		b.ResetTimer()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			keys := []string{""}
			for pb.Next() {
				keys[0] = "bench:evalsha:sl2:{GET /r/:id ip:" + ips[n.Add(1)%int64(len(ips))] + "}"
				if err := s.Run(context.Background(), c, keys, args...).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkRedisDown serves a bare route and a limited route whose Redis is
// gone over real loopback HTTP, alternating, once the breaker has opened,
// and reports both p99 latencies and their ratio (issue 5's goal: at most
// 2). Run: go test -run '^$' -bench RedisDown -benchtime 20000x ./ginlimit
func BenchmarkRedisDown(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = dead.Close() })
	e := gin.New()
	e.GET("/bare", func(c *gin.Context) { c.Status(http.StatusOK) })
	// With Redis down, the FailLocal fallback decides every request: a
	// limit no run can spend keeps each one admitted, as the loop needs.
	e.GET("/limited", testLimit(Redis(dead), Type(IP), Limit(benchLimit), withLogger(slog.New(slog.DiscardHandler))), func(c *gin.Context) { c.Status(http.StatusOK) })
	srv := httptest.NewServer(e)
	b.Cleanup(srv.Close)
	client := srv.Client()
	get := func(path string) time.Duration {
		start := time.Now()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 20 { // fail enough to open the breaker
		get("/limited")
	}
	bare := make([]time.Duration, 0, b.N)
	limited := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		bare = append(bare, get("/bare"))
		limited = append(limited, get("/limited"))
	}
	b.StopTimer()
	p99 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)*99/100]) / float64(time.Microsecond)
	}
	pb, pl := p99(bare), p99(limited)
	b.ReportMetric(pb, "p99-bare-µs")
	b.ReportMetric(pl, "p99-limited-µs")
	b.ReportMetric(pl/pb, "p99-ratio")
}
