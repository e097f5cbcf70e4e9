// Package redistest starts a real redis-server for a test, on a free loopback
// port, and stops it when the test ends. It never touches a shared Redis.
//
// When redis-server is not on PATH the test is skipped with a clear message,
// or fails if GINLIMIT_REQUIRE_REDIS=1 (as in CI).
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a failure.
const RequireEnv = "GINLIMIT_REQUIRE_REDIS"

// Server is a redis-server process owned by one test.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string

	t    testing.TB
	bin  string
	port int
	dir  string

	cmd    *exec.Cmd
	exited chan struct{}
	held   func() // releases the port held while stopped (reserve); nil while running
}

// Start starts a redis-server for t and registers its shutdown with
// t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server is not on PATH and %s=1: install it (apt-get install -y redis-server)", RequireEnv)
		}
		t.Skipf("redis-server is not on PATH; skipping the real-Redis test (install it with apt-get install -y redis-server, or set %s=1 to fail instead)", RequireEnv)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	var lastErr error
	for range 5 {
		s.port, lastErr = freePort()
		if lastErr != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.close)
			return s
		}
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error { return s.launch(nil, "") }

// launch starts redis-server on s.port with the common arguments plus extra,
// and waits until it answers PING. logFile, if not empty, is where the
// server logs; its tail goes into a start-up error.
func (s *Server) launch(extra []string, logFile string) error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning",
		// DEBUG SLEEP makes a Redis slow on purpose, for tests of timeouts.
		"--enable-debug-command", "local"}
	if logFile != "" {
		args = append(args, "--logfile", logFile)
	}
	cmd := exec.Command(s.bin, append(args, extra...)...)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			msg := ""
			if logFile != "" {
				msg = tail(logFile)
			}
			return fmt.Errorf("redis-server on port %d exited at start%s", s.port, msg)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			// Another test's server may hold the port, and answer for a
			// server that is still failing to bind it.
			if !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				_ = cmd.Process.Kill()
				<-exited
				return fmt.Errorf("port %d answers for another redis-server", s.port)
			}
			s.cmd, s.exited = cmd, exited
			return nil
		}
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer PING", s.port)
}

// Stop kills the server and waits for it to exit; until Restart, its port
// refuses connections and, where it can be held (reserve), no other
// server takes it. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
	s.held = reserve(s.port)
}

// close stops the server for good, and lets its port go.
func (s *Server) close() {
	s.Stop()
	if s.held != nil {
		s.held()
		s.held = nil
	}
}

// Restart starts a stopped server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if s.held != nil {
		s.held()
		s.held = nil
	}
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.port, err)
}

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}
