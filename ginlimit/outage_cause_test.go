package ginlimit

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestBrokenConnectionOfAGoneRedisSaysWhy: a Redis that goes away under a
// call closes its connection (EOF), and the one new dial ginlimit makes is
// refused; the call's error, which the outage's warning logs, says so. The
// EOF alone would not tell that the server is gone, and whether a call is
// cut by the death or finds it at its dial depends on timing (the race
// that made TestFailureLogsTheOutageOnceWithItsCause log "error=EOF").
// Only the decision on the key "cut" is cut, not the upkeep's calls, and
// the Timeout is long, so that the refusal, not the deadline, ends the
// call on a loaded machine.
func TestBrokenConnectionOfAGoneRedisSaysWhy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startCuttingProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()})
	t.Cleanup(func() { _ = c.Close() })
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Limit(100), OnFailure(FailClosed), Timeout(5*time.Second))
	warmUp(t, p, "k")
	_ = proxy.ln.Close() // a new connection is refused
	proxy.cut.Store(true)
	_, err := p.Allow(context.Background(), "cut", 1)
	if err == nil || !strings.Contains(err.Error(), "a new connection") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a call whose connection closed, with new ones refused: %v; want the refused dial named", err)
	}
}

// cuttingProxy forwards connections to a redis-server; once cut is set, it
// closes the connection that carries a request naming the key "cut",
// before the request reaches the server.
type cuttingProxy struct {
	ln  net.Listener
	cut atomic.Bool
	mu  sync.Mutex
	cs  []net.Conn
	wg  sync.WaitGroup
}

func startCuttingProxy(t *testing.T, upstream string) *cuttingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{ln: ln}
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
			p.cs = append(p.cs, client, server)
			p.mu.Unlock()
			p.wg.Go(func() {
				_, _ = io.Copy(client, server)
				_ = client.Close()
			})
			p.wg.Go(func() { p.forward(client, server) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.cs {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// forward copies the client's requests to the server until either closes,
// or until a request names the key "cut" while cut is set.
func (p *cuttingProxy) forward(client, server net.Conn) {
	defer server.Close()
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 && p.cut.Load() && bytes.Contains(buf[:n], []byte("{cut}")) {
			return
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
}
