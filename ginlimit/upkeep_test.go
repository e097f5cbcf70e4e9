package ginlimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// clientCalls returns how many scripts and PINGs c's server has been
// sent, as INFO commandstats counts them: the calls a client makes (the
// commands a script runs are counted apart, under their own names).
func clientCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_ping") {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		calls, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		n += calls
	}
	return n
}

// TestOneUpkeepPerClient: the routes of a Limiter on one Redis client
// share one fleet, whatever their backend settings, so an idle Limiter
// makes at most one call per tick there (and one more for a tick under
// way as the count began), not one per backend.
func TestOneUpkeepPerClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	l, err := New(Redis(c), Timeout(testTimeout), Key(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	a, err := l.Policy()
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Policy(autoPipeline(false))
	if err != nil {
		t.Fatal(err)
	}
	if a.route.Engine == b.route.Engine {
		t.Fatal("the two policies share a backend: the test proves nothing")
	}
	if a.route.Fleet != b.route.Fleet {
		t.Fatal("two backends on one client have a fleet each")
	}
	admin := srv.Client()
	before, start := clientCalls(t, admin), time.Now()
	time.Sleep(4 * fleet.Tick)
	got := clientCalls(t, admin) - before
	limit := int64(time.Since(start)/fleet.Tick) + 1
	t.Logf("%d calls in %v", got, time.Since(start).Round(time.Millisecond))
	if got > limit {
		t.Fatalf("an idle Limiter made %d calls in %v, want at most %d: one per tick", got, time.Since(start).Round(time.Millisecond), limit)
	}
}
