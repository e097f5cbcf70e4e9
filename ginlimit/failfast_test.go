package ginlimit

// Failing fast: a Redis that refuses connections, or that reset one, is
// known at once; only a Redis that does not answer costs a Timeout. The
// Timeouts here are long on purpose (5 s), so that a decision that waited
// for one is unmistakable, and no assertion needs a decision to beat a
// short deadline.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// deadAddr returns a loopback address that nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// failFastTimeout is the Timeout of the tests of a dead Redis. Their 20
// decisions may take faultHang in all: far above a loaded machine's stalls
// (over 2 s measured), and far below one decision that waited for the
// Timeout instead of failing fast.
const failFastTimeout = time.Minute

// checkFailsFast makes 20 sequential decisions of p, whose Redis is dead,
// and checks that each is a Redis failure under FailLocal, that the first
// five are counted by the breaker, which opens at the fifth (the default),
// and that the 20 take well under the Timeout in all.
func checkFailsFast(t *testing.T, p *Policy) {
	t.Helper()
	brk := p.route.Engine.Breaker()
	start := time.Now()
	for i := range 20 {
		d, err := p.Allow(context.Background(), "k", 1)
		switch {
		case err == nil:
			t.Fatalf("decision %d: no error from a dead Redis: %+v", i, d)
		case errors.Is(err, ErrSaturated):
			t.Fatalf("decision %d: %v: a dead Redis is a failure, not saturation", i, err)
		case i < DefaultBreakerFailures && errors.Is(err, ErrCircuitOpen):
			t.Fatalf("decision %d: %v: the breaker opened before %d failures", i, err, DefaultBreakerFailures)
		case d.Cached:
			t.Fatalf("decision %d: %+v, want the FailLocal fallback's", i, d)
		}
		if i < DefaultBreakerFailures {
			// Counted: the breaker opens at the default's fifth failure,
			// not before.
			opened := brk.State() != "closed"
			if want := i+1 == DefaultBreakerFailures; opened != want {
				t.Fatalf("after %d failures the breaker has opened: %v, want %v (%d failures counted)", i+1, opened, want, brk.Failures())
			}
		}
	}
	el := time.Since(start)
	if el >= faultHang {
		t.Fatalf("20 decisions on a dead Redis took %v with a %v Timeout: they waited for Redis", el, failFastTimeout)
	}
	t.Logf("20 decisions on a dead Redis took %v", el)
}

// TestDeadRedisFailsFast: with nothing listening on Redis's port, 20
// sequential decisions fail at once under FailLocal, on a plain client
// with and without ContextTimeoutEnabled, directly and auto-pipelined, and
// the breaker counts the failures. go-redis alone would have held each for
// its retries (3, each dialling 5 times, 100 ms apart): the Timeout.
func TestDeadRedisFailsFast(t *testing.T) {
	for _, ctxAware := range []bool{false, true} {
		for _, pipelined := range []bool{false, true} {
			t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v/pipelined=%v", ctxAware, pipelined), func(t *testing.T) {
				t.Parallel()
				c := redis.NewClient(&redis.Options{Addr: deadAddr(t), ContextTimeoutEnabled: ctxAware})
				t.Cleanup(func() { _ = c.Close() })
				p := mustPolicy(t, Redis(c), Key(prefix(t)), OnFailure(FailLocal), autoPipeline(pipelined), Timeout(failFastTimeout))
				if pipelined {
					p.route.Engine.SetPipelineAbove(0) // every call through the auto-pipeliner
				}
				checkFailsFast(t, p)
			})
		}
	}
}

// TestStoppedRedisFailsFast: once a redis-server that served decisions is
// stopped, the first failing decision makes the next ones fail at once:
// the 19 after it take well under a second. (The first may wait for
// go-redis's pool to dial the server DialerRetries times: the pool is the
// application's, and ginlimit learns that Redis went away from that
// failure.)
func TestStoppedRedisFailsFast(t *testing.T) {
	for _, ctxAware := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxAware), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxAware})
			t.Cleanup(func() { _ = c.Close() })
			p := mustPolicy(t, Redis(c), Key(prefix(t)), OnFailure(FailLocal), Timeout(failFastTimeout), withBreaker(0, 0))
			for i := range 3 {
				if _, err := p.Allow(context.Background(), "k", 1); err != nil {
					t.Fatalf("decision %d on a healthy Redis: %v", i, err)
				}
			}
			srv.Stop()
			first := time.Now()
			if _, err := p.Allow(context.Background(), "k", 1); err == nil {
				t.Fatal("no error from a stopped Redis")
			}
			t.Logf("the first decision after the stop took %v", time.Since(first))
			start := time.Now()
			for i := range 19 {
				if _, err := p.Allow(context.Background(), "k", 1); err == nil || errors.Is(err, ErrSaturated) {
					t.Fatalf("decision %d after the stop: %v, want a Redis failure", i+1, err)
				}
			}
			if el := time.Since(start); el >= faultHang {
				t.Fatalf("19 decisions on a stopped Redis took %v with a %v Timeout: they waited for Redis", el, failFastTimeout)
			}
		})
	}
}

// silentServer accepts connections and reads them, and never answers: a
// Redis that hangs (SIGSTOP, a full disk) while the kernel still accepts.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestSilentRedisCostsATimeout: a Redis that takes connections and never
// answers still costs each decision its Timeout, and each is a failure
// that the breaker counts: that the server takes connections is no
// answer.
func TestSilentRedisCostsATimeout(t *testing.T) {
	for _, ctxAware := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxAware), func(t *testing.T) {
			t.Parallel()
			const timeout = 200 * time.Millisecond
			// ReadTimeout bounds how long Close waits for the reset subscription.
			c := redis.NewClient(&redis.Options{Addr: silentServer(t), ContextTimeoutEnabled: ctxAware, ReadTimeout: time.Second})
			t.Cleanup(func() { _ = c.Close() })
			p := mustPolicy(t, Redis(c), Key(prefix(t)), OnFailure(FailLocal), Timeout(timeout))
			brk := p.route.Engine.Breaker()
			for i := range DefaultBreakerFailures {
				start := time.Now()
				_, err := p.Allow(context.Background(), "k", 1)
				el := time.Since(start)
				if el < timeout {
					t.Fatalf("decision %d took %v, less than the %v Timeout, with a Redis that never answers: %v", i, el, timeout, err)
				}
				if !isTimeout(err) || errors.Is(err, ErrSaturated) {
					t.Fatalf("decision %d: %v, want a Redis failure for not answering in time", i, err)
				}
				// The limiter's heartbeat (internal/fleet) fails as well, and
				// may add to the count.
				if got := brk.Failures(); got < i+1 {
					t.Fatalf("after %d decisions the breaker counted %d failures", i+1, got)
				}
			}
			if brk.State() == "closed" {
				t.Fatalf("the breaker did not open after %d failures", DefaultBreakerFailures)
			}
		})
	}
}

// breakingProxy forwards connections to a Redis. Told to (breakNext), it
// closes the connection of the next command it reads without forwarding
// it: one connection reset while Redis is fine. Told to (holdNext), it
// holds the reply to the next command it reads for that long (the next
// that names holdOnly, when it is set, so that the Limiter's upkeep calls
// do not take the hold): a reply that this process reads late. Once
// cutNaming is set, it closes the connection of every command that names
// it: a Redis gone under that call, and only that one.
type breakingProxy struct {
	ln        net.Listener
	breakNext atomic.Bool
	cutNaming atomic.Value // a string
	holdNext  atomic.Int64 // a time.Duration
	holdOnly  atomic.Value // a string
	broken    atomic.Int64
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     []net.Conn
}

func startBreakingProxy(t *testing.T, upstream string) *breakingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &breakingProxy{ln: ln}
	p.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			var hold atomic.Int64 // the next reply's, on this connection
			p.wg.Go(func() {
				defer client.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 {
						time.Sleep(time.Duration(hold.Swap(0)))
						if _, err := client.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
			p.wg.Go(func() {
				defer server.Close()
				defer client.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := client.Read(buf)
					if n > 0 && p.breakNext.CompareAndSwap(true, false) {
						p.broken.Add(1)
						return
					}
					if cut, _ := p.cutNaming.Load().(string); n > 0 && cut != "" && bytes.Contains(buf[:n], []byte(cut)) {
						return
					}
					if only, _ := p.holdOnly.Load().(string); n > 0 && (only == "" || bytes.Contains(buf[:n], []byte(only))) {
						hold.Store(p.holdNext.Swap(0))
					}
					if n > 0 {
						if _, err := server.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// TestBrokenConnectionIsRetried: a connection that breaks under a call
// while Redis is fine fails no decision: ginlimit's calls are not retried
// by go-redis (its retries would hold a dead Redis's calls), so ginlimit
// makes the call once more itself, once a dial shows that Redis takes
// connections. No failure is counted.
func TestBrokenConnectionIsRetried(t *testing.T) {
	srv := redistest.Start(t)
	for _, ctxAware := range []bool{false, true} {
		for _, pipelined := range []bool{false, true} {
			t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v/pipelined=%v", ctxAware, pipelined), func(t *testing.T) {
				t.Parallel()
				proxy := startBreakingProxy(t, srv.Addr)
				c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), ContextTimeoutEnabled: ctxAware})
				t.Cleanup(func() { _ = c.Close() })
				p := mustPolicy(t, Redis(c), Key(prefix(t)), Limit(100), OnFailure(FailClosed), autoPipeline(pipelined))
				if pipelined {
					p.route.Engine.SetPipelineAbove(0)
				}
				for i := range 3 {
					proxy.breakNext.Store(i == 1)
					d, err := p.Allow(context.Background(), "k", 1)
					if err != nil || d.Cached || !d.Allowed {
						t.Fatalf("decision %d: %+v, %v; want an admission from Redis", i, d, err)
					}
				}
				if proxy.broken.Load() != 1 {
					t.Fatalf("the proxy broke %d connections, want 1", proxy.broken.Load())
				}
				if n := p.route.Engine.Breaker().Failures(); n != 0 {
					t.Fatalf("the breaker counted %d failures", n)
				}
			})
		}
	}
}

// TestLateReplyIsNoFailure: a call that runs out of its Timeout while
// Redis answers a PING at once is no Redis failure: its reply was there,
// read late (a CPU-starved process, here a proxy holding one reply). It
// gets the saturation answer, and the breaker counts nothing.
func TestLateReplyIsNoFailure(t *testing.T) {
	srv := redistest.Start(t)
	for _, ctxAware := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxAware), func(t *testing.T) {
			t.Parallel()
			// The verdict rests on the PING beating the Timeout: a second
			// is what a loaded machine needs for it; the held reply comes
			// well after it.
			const timeout = time.Second
			proxy := startBreakingProxy(t, srv.Addr)
			c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), ContextTimeoutEnabled: ctxAware})
			t.Cleanup(func() { _ = c.Close() })
			p := mustPolicy(t, Redis(c), Key(prefix(t)), Limit(100), OnFailure(FailLocal), Timeout(timeout))
			warmUp(t, p, "k")
			proxy.holdOnly.Store("{k}") // the decision's key
			proxy.holdNext.Store(int64(3 * timeout))
			_, err := p.Allow(context.Background(), "k", 1)
			if !errors.Is(err, ErrSaturated) {
				t.Fatalf("a reply held past the Timeout by a Redis that answers a PING: %v, want ErrSaturated", err)
			}
			if n := p.route.Engine.Breaker().Failures(); n != 0 {
				t.Fatalf("the breaker counted %d failures", n)
			}
		})
	}
}

// warmUp has Redis decide key on p once (its connection, its scripts),
// trying again for up to 30 s: on a loaded machine a call can miss a short
// Timeout, and the test needs the warm state, not a fast call. The breaker
// closes on the success.
func warmUp(t *testing.T, p *Policy, key string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d, err := p.Allow(context.Background(), key, 1)
		if err == nil && !d.Local {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm-up on %s: %+v, %v; Redis did not decide within 30 s", key, d, err)
		}
	}
}
