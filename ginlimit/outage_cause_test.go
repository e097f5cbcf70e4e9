package ginlimit

import (
	"context"
	"strings"
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
	proxy := startBreakingProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()})
	t.Cleanup(func() { _ = c.Close() })
	p := mustPolicy(t, Redis(c), Key(prefix(t)), Limit(100), OnFailure(FailClosed), Timeout(5*time.Second))
	warmUp(t, p, "k")
	_ = proxy.ln.Close() // a new connection is refused
	proxy.cutNaming.Store("{cut}")
	_, err := p.Allow(context.Background(), "cut", 1)
	if err == nil || !strings.Contains(err.Error(), "a new connection") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a call whose connection closed, with new ones refused: %v; want the refused dial named", err)
	}
}
