package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// countingWatcher counts what a Watcher is told.
type countingWatcher struct{ failing, answering atomic.Int32 }

func (w *countingWatcher) Failing(error) bool { w.failing.Add(1); return true }

func (w *countingWatcher) Answering(time.Duration, int64) { w.answering.Add(1) }

// TestLeaseLaneReportsAnOutageOnce: the lease lane has a node of its own
// per server (its pool, its breaker), but an outage of the server is one
// outage: a decision and a renewal that both find Redis gone report it
// once, and its end once.
func TestLeaseLaneReportsAnOutageOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	e, err := New(Config{Client: c, BreakerFailures: 100, BreakerOpen: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	w := &countingWatcher{}
	e.Watch(w)
	ctx := context.Background()
	both := func(wantErr bool) {
		t.Helper()
		if _, _, err := e.Run(ctx, 2*time.Second, 2*time.Second, one, []string{"k"}, nil); (err != nil) != wantErr {
			t.Fatalf("decision: %v, want an error %v", err, wantErr)
		}
		if _, _, err := e.Aside(ctx, 2*time.Second, one, []string{"k"}, nil); (err != nil) != wantErr {
			t.Fatalf("lease call: %v, want an error %v", err, wantErr)
		}
	}
	both(false) // the lane's node and pool exist from here
	srv.Stop()
	both(true)
	srv.Restart()
	both(false)
	if f, a := w.failing.Load(), w.answering.Load(); f != 1 || a != 1 {
		t.Errorf("one outage seen by both lanes was reported failing %d times, answering %d times; want 1 and 1", f, a)
	}
}

// heldBackWatcher reports a failure only when told to, as OutageLog's
// throttle does for an outage that starts soon after a logged one.
type heldBackWatcher struct {
	report    bool
	failing   int
	answering []int64
}

func (w *heldBackWatcher) Failing(error) bool { w.failing++; return w.report }

func (w *heldBackWatcher) Answering(_ time.Duration, failures int64) {
	w.answering = append(w.answering, failures)
}

// TestAHeldBackOutageIsReportedWhileItLasts: a Redis that failed once and
// answered (a blip the Watcher reported), then failed for good while the
// Watcher held reports back, is reported by a later failure of the same
// outage, and its end is reported. Without that, a long outage right
// after a blip would never be reported.
func TestAHeldBackOutageIsReportedWhileItLasts(t *testing.T) {
	var h health
	w := &heldBackWatcher{report: true}
	h.note(w, true, context.DeadlineExceeded) // the blip, reported
	h.note(w, false, nil)                     // and its end
	w.report = false
	h.note(w, true, context.DeadlineExceeded) // the outage starts, held back
	h.note(w, true, context.DeadlineExceeded) // still held back
	w.report = true
	h.note(w, true, context.DeadlineExceeded) // reported now
	h.note(w, true, context.DeadlineExceeded) // reported already: not told again
	h.note(w, false, nil)
	if w.failing != 4 || len(w.answering) != 2 || w.answering[1] != 4 {
		t.Errorf("Failing told %d times, ends %v; want 4, and two ends, the second after 4 failures", w.failing, w.answering)
	}
}
