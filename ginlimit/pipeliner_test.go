package ginlimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestAutoPipelinerIsItsOwn: go-redis caches one async auto-pipeliner per
// *redis.Client, shared by every caller: the first caller's options win, and
// its Close ends it for everyone. ginlimit's is its own (on a clone of the
// application's client, sharing its pool): an application that made its
// own first keeps it, with its options, and closing the Limiter leaves it
// working.
func TestAutoPipelinerIsItsOwn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	theirs, err := c.AsyncAutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Timeout(testTimeout), Redis(c))
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Policy(Key(prefix(t)), Window(time.Minute), Limit(10))
	if err != nil {
		t.Fatal(err)
	}
	if p.route.Engine.Pipeliner() == nil {
		t.Fatal("no auto-pipeliner with the defaults")
	}
	if p.route.Engine.Pipeliner() == theirs {
		t.Fatal("ginlimit uses the application's own auto-pipeliner: its options lose, and Limiter.Close would end it")
	}
	ctx := context.Background()
	// Calls in flight at once take the pipelined path.
	done := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := p.Allow(ctx, "k", 1)
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := redis.NewCmd(ctx, "ping")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := theirs.Submit(wctx, cmd).WaitContext(wctx); err != nil {
		t.Fatalf("the application's auto-pipeliner after Limiter.Close: %v", err)
	}
	if got := cmd.Val(); got != "PONG" {
		t.Fatalf("PING through the application's auto-pipeliner: %v", got)
	}
}
