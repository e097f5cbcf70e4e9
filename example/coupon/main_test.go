package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// runMainEnv, set to 1, makes the test binary run the command's main
// instead of the tests, so that a test can run the command as a process
// of its own, with its real process-wide logging.
const runMainEnv = "COUPON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// logLine is the form of every line of slog's text handler.
var logLine = regexp.MustCompile(`^time=\S+ level=(DEBUG|INFO|WARN|ERROR) msg=`)

// TestOutageInOneLogFormat runs the command against a Redis address that
// nothing listens on (a redis-server started, then stopped), with
// FAIL_POLICY=closed, as its operator would: it starts and serves, 503 with
// Retry-After on a limited route and 200 on /healthz; it logs the outage
// once, with its real cause; once the server is back, a limited route is
// decided by Redis again and the recovery is logged. Every line it writes,
// its own, ginlimit's, go-redis's and gin's, is in the one format of its
// slog handler.
func TestOutageInOneLogFormat(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "ADDR=127.0.0.1:0", "REDIS_URL=redis://"+srv.Addr+"/0",
		"FAIL_POLICY=closed", "JWT_SECRET=coupon-main-test-secret-0123456789abcdef", "GIN_MODE=debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	listening := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if _, addr, ok := strings.Cut(sc.Text(), `msg="coupon: listening" addr=`); ok {
				listening <- addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var base string
	select {
	case addr := <-listening:
		base = "http://" + addr
	case <-time.After(60 * time.Second):
		t.Fatal("the command did not listen within 60 s")
	}
	logs := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	get := func(path string) *http.Response {
		t.Helper()
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = r.Body.Close()
		return r
	}
	if r := get("/api/coupon/seckill"); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Errorf("a limited route with Redis down: %d, Retry-After %q; want 503 with one", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if r := get("/healthz"); r.StatusCode != http.StatusOK {
		t.Errorf("/healthz with Redis down: %d", r.StatusCode)
	}
	waitFor(t, logs, "Redis is failing")
	srv.Restart()
	for deadline := time.Now().Add(30 * time.Second); get("/api/coupon/seckill").StatusCode != http.StatusOK; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Redis does not decide 30 s after it came back")
		}
	}
	waitFor(t, logs, "Redis answers again")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-read
	_ = cmd.Wait()

	failing := 0
	for _, l := range lines {
		if !logLine.MatchString(l) {
			t.Errorf("a line in another format: %q", l)
		}
		if strings.Contains(l, "Redis is failing") {
			failing++
			if !strings.Contains(l, "connection refused") {
				t.Errorf("the outage is logged without its cause, a refused connection: %q", l)
			}
		}
	}
	if failing != 1 {
		t.Errorf("the outage is logged %d times, want once:\n%s", failing, logs())
	}
	t.Logf("%d lines:\n%s", len(lines), logs())
}

// waitFor waits, 30 s at most, until logs() holds want.
func waitFor(t *testing.T, logs func() string, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(logs(), want) {
		select {
		case <-ctx.Done():
			t.Fatalf("the log lacks %q after 30 s:\n%s", want, logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
