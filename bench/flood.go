package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The flood: many callers hammer one key far past its limit. It shows
// whether a limiter admits exactly its limit under contention, how many
// script calls reach Redis once the key is full, and what a rejection costs.
const (
	floodLimit   = 100
	floodWindow  = 60 * time.Second
	floodCallers = 32
	floodKey     = "flood"
)

// floodResult is one case's flood.
type floodResult struct {
	Case        *benchCase
	Run         runResult // Hist holds the rejected decisions only
	ScriptCalls int64     // EVALSHA + EVAL calls Redis saw
	// Crossed says that the flood of an Aligned case spanned a window
	// boundary on the Redis clock after all (see clearOfBoundary).
	Crossed bool
}

// Rejected returns the number of decisions that were answered "no".
func (f floodResult) Rejected() int64 { return f.Run.Denied() }

// flood runs the floods on the benchmark's server: the admin client reads
// the Redis clock and its command counts, and the workers send the
// decisions.
type flood struct {
	admin   *redis.Client
	addr    string // the server's
	workers *workers
}

// run sends total decisions for one fresh key with a limit of
// floodLimit per floodWindow from floodCallers goroutines on one client (of
// the case's kind).
func (fl flood) run(ctx context.Context, c *benchCase, total int64) (floodResult, error) {
	if err := fl.admin.FlushDB(ctx).Err(); err != nil {
		return floodResult{}, fmt.Errorf("FLUSHDB: %w", err)
	}
	rdb := c.Client.newClient(fl.addr)
	defer rdb.Close()
	d, err := c.New(rdb, floodLimit, floodWindow)
	if err != nil {
		return floodResult{}, err
	}
	// Dial the pool and load the scripts on a key of its own, so the flood
	// starts on a fresh key with everything warm.
	fl.workers.run(ctx, d, runSpec{callers: floodCallers, keys: []string{"flood-warmup"}, total: floodCallers * 4})
	var window int64
	if c.Aligned {
		if window, err = fl.clearOfBoundary(ctx, floodMargin(total)); err != nil {
			return floodResult{}, err
		}
	}
	if err := fl.admin.ConfigResetStat(ctx).Err(); err != nil {
		return floodResult{}, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	r := fl.workers.run(ctx, d, runSpec{callers: floodCallers, keys: []string{floodKey}, total: total, rejectedOnly: true})
	stats, err := readCmdStats(ctx, fl.admin)
	if err != nil {
		return floodResult{}, err
	}
	f := floodResult{Case: c, Run: r, ScriptCalls: stats.scriptCalls()}
	if c.Aligned {
		end, err := fl.redisWindow(ctx)
		if err != nil {
			return floodResult{}, err
		}
		f.Crossed = end != window
	}
	return f, nil
}

// floodMargin is how far from the end of an aligned window a flood of total
// decisions must start: a second, plus 30 µs a decision (a third of the rate
// the floods run at on a 2-core machine), so that it ends in the window it
// began in.
func floodMargin(total int64) time.Duration {
	return time.Second + time.Duration(total)*30*time.Microsecond
}

// redisWindow returns the index of the floodWindow-aligned window that the
// Redis clock is in, as a fixed window on the Redis clock counts it.
func (fl flood) redisWindow(ctx context.Context) (int64, error) {
	now, err := fl.admin.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("TIME: %w", err)
	}
	return now.UnixMicro() / floodWindow.Microseconds(), nil
}

// clearOfBoundary waits, when the Redis clock is less than margin before the
// end of a floodWindow-aligned window, until the next window has begun, and
// returns the window the clock is then in. The wait is at most margin.
func (fl flood) clearOfBoundary(ctx context.Context, margin time.Duration) (int64, error) {
	now, err := fl.admin.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("TIME: %w", err)
	}
	w := floodWindow.Microseconds()
	left := time.Duration(w-now.UnixMicro()%w) * time.Microsecond
	if left >= margin {
		return now.UnixMicro() / w, nil
	}
	progress("flood: %v left in the aligned window, waiting for the next one", left.Round(time.Millisecond))
	time.Sleep(left + 10*time.Millisecond)
	return fl.redisWindow(ctx)
}

// expectedAdmitted says what the flood should admit: exactly floodLimit for
// an exact algorithm (up to twice that for an aligned fixed window whose
// flood crossed a boundary after all); for GCRA, the burst plus what the
// emission rate refills while the flood lasts (one per window/limit).
func expectedAdmitted(f floodResult) string {
	switch {
	case f.Case.Exact && f.Crossed:
		return fmt.Sprintf("%d per window; the flood crossed a window boundary, so %d to %d", floodLimit, floodLimit, 2*floodLimit)
	case f.Case.Exact:
		return fmt.Sprint(floodLimit)
	}
	interval := floodWindow / floodLimit
	return fmt.Sprintf("≈ %d + %d (GCRA refills 1 per %v; the flood took %.2f s)",
		floodLimit, int64(f.Run.Elapsed/interval), interval, f.Run.Elapsed.Seconds())
}

// exactEnough reports whether an exact case's flood admitted what it must:
// the limit, or for a flood that crossed an aligned window's boundary, at
// least the limit and at most one more limit.
func exactEnough(f floodResult) bool {
	if f.Crossed {
		return f.Run.Allowed >= floodLimit && f.Run.Allowed <= 2*floodLimit
	}
	return f.Run.Allowed == floodLimit
}
