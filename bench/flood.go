package main

import (
	"context"
	"fmt"
	"time"
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
}

// Rejected returns the number of decisions that were answered "no".
func (f floodResult) Rejected() int64 { return f.Run.Decisions - f.Run.Allowed - f.Run.Errors }

// runFlood sends total decisions for one fresh key with a limit of
// floodLimit per floodWindow from floodCallers goroutines on one client.
func (e *env) runFlood(ctx context.Context, c *benchCase, total int64) (floodResult, error) {
	if err := e.admin.FlushDB(ctx).Err(); err != nil {
		return floodResult{}, fmt.Errorf("FLUSHDB: %w", err)
	}
	rdb := newClient(e.srv.Addr)
	defer rdb.Close()
	d, err := c.New(rdb, floodLimit, floodWindow)
	if err != nil {
		return floodResult{}, err
	}
	// Dial the pool and load the scripts on a key of its own, so the flood
	// starts on a fresh key with everything warm.
	e.workers.run(ctx, d, runSpec{callers: floodCallers, keys: []string{"flood-warmup"}, total: floodCallers * 4})
	if err := e.admin.ConfigResetStat(ctx).Err(); err != nil {
		return floodResult{}, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	r := e.workers.run(ctx, d, runSpec{callers: floodCallers, keys: []string{floodKey}, total: total, rejectedOnly: true})
	stats, err := readCmdStats(ctx, e.admin)
	if err != nil {
		return floodResult{}, err
	}
	return floodResult{Case: c, Run: r, ScriptCalls: stats.scriptCalls()}, nil
}

// expectedAdmitted says what the flood should admit: exactly floodLimit for
// an exact algorithm; for GCRA, the burst plus what the emission rate refills
// while the flood lasts (one per window/limit).
func expectedAdmitted(f floodResult) string {
	if f.Case.Exact {
		return fmt.Sprint(floodLimit)
	}
	interval := floodWindow / floodLimit
	return fmt.Sprintf("≈ %d + %d (GCRA refills 1 per %v; the flood took %.2f s)",
		floodLimit, int64(f.Run.Elapsed/interval), interval, f.Run.Elapsed.Seconds())
}
