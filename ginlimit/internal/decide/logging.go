package decide

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Log lines are written through log/slog and never carry an identity (an
// IP address, a user id, or a Redis key, which holds one). A line that
// could repeat on every request goes through a LogThrottle.

// LogEvery is the least time between two log lines of one LogThrottle, so
// that a Redis outage under load writes one line every few seconds, not one
// per request.
const LogEvery = 5 * time.Second

// LogThrottle writes at most one record per LogEvery and counts the ones it
// drops. It is safe for concurrent use.
type LogThrottle struct {
	next       atomic.Int64 // unix nanoseconds before which records are dropped
	suppressed atomic.Int64
}

// log writes the record unless one was written less than LogEvery ago,
// and reports whether it wrote it.
func (t *LogThrottle) Log(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) bool {
	now := time.Now().UnixNano()
	next := t.next.Load()
	if now < next || !t.next.CompareAndSwap(next, now+int64(LogEvery)) {
		t.suppressed.Add(1)
		return false
	}
	if l == nil {
		l = slog.Default()
	}
	if n := t.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	l.LogAttrs(ctx, level, msg, attrs...)
	return true
}

// OutageLog is how a backend's engine reports Redis outages
// (engine.Watcher): the first failure of a Redis server after it answered
// is logged once, at warn, with its own error, which says why (a refused
// connection, say); its end, the first answer after it, at info, with how
// long Redis failed and how many calls failed meanwhile. The decisions
// taken meanwhile under the failure policy are logged at debug only
// (Policy.answer). An outage that starts less than LogEvery after a
// logged one (a flapping Redis) is logged by its first failure after
// LogEvery, with the count of those held back; one that ended before is
// not, and neither is its end.
type OutageLog struct {
	Logger *slog.Logger // nil: slog.Default() at the time of logging
	starts LogThrottle
}

// Failing logs the start of an outage, with its cause, unless one was
// logged less than LogEvery ago, and reports whether it did.
func (o *OutageLog) Failing(cause error) bool {
	return o.starts.Log(context.Background(), o.Logger, slog.LevelWarn,
		"ginlimit: Redis is failing; limited routes apply their failure policy until it answers", ErrAttr(cause))
}

// Answering logs the end of an outage: how long Redis failed and how
// many calls failed meanwhile.
func (o *OutageLog) Answering(down time.Duration, failures int64) {
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), slog.LevelInfo, "ginlimit: Redis answers again",
		slog.Duration("down", down), slog.Int64("failed_calls", failures))
}

// ErrAttr is err as the attribute "error" of a log line.
func ErrAttr(err error) slog.Attr { return slog.String("error", err.Error()) }
