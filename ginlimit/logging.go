package ginlimit

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Log lines are written through log/slog and never carry an identity (an
// IP address, a user id, or a Redis key, which holds one). A line that
// could repeat on every request goes through a logThrottle.

// logEvery is the least time between two log lines of one logThrottle, so
// that a Redis outage under load writes one line every few seconds, not one
// per request.
const logEvery = 5 * time.Second

// logThrottle writes at most one record per logEvery and counts the ones it
// drops. It is safe for concurrent use.
type logThrottle struct {
	next       atomic.Int64 // unix nanoseconds before which records are dropped
	suppressed atomic.Int64
}

func (t *logThrottle) log(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	now := time.Now().UnixNano()
	next := t.next.Load()
	if now < next || !t.next.CompareAndSwap(next, now+int64(logEvery)) {
		t.suppressed.Add(1)
		return
	}
	if l == nil {
		l = slog.Default()
	}
	if n := t.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	l.LogAttrs(ctx, level, msg, attrs...)
}

func errAttr(err error) slog.Attr { return slog.String("error", err.Error()) }
