package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The script-cost section: Redis µs per call of every deciding case on the
// admit path and on the reject path, measured in the same interleaved way
// as the throughput cells, and the ceiling each implies for one Redis.

const (
	// rejectWindow is the window of the reject path: long enough that
	// nothing admitted while the keys are filled leaves it during the run.
	rejectWindow = time.Hour
	// scriptCostCallers is the concurrency of both paths: enough callers to
	// keep redis-server busy (at 1 caller, a call's time includes waking an
	// idle CPU), few enough that no client waits for a pooled connection.
	scriptCostCallers = 8
)

// scriptCost is one case's Redis µs per call on both paths.
type scriptCost struct {
	Case           *benchCase
	Admit, Reject  cellResult
	AdmitDenied    int64 // decisions of the admit run that rejected (should be 0)
	RejectAdmitted int64 // decisions of the reject run that admitted (should be 0)
}

// measureScriptCost measures every deciding case (no floors, and none with
// the deny cache on) twice, each
// time on an emptied database, in interleaved rounds: the admit path with
// the configured rule (limit per window, which the run never reaches), and
// the reject path with a limit of 1 per rejectWindow on keys that already
// hold their one admission (each key is sent one request first).
func (e *env) measureScriptCost(ctx context.Context, cases []*benchCase) ([]scriptCost, error) {
	var deciding []*benchCase
	for _, c := range cases {
		// The defaults cases have the deny cache on: most of their
		// rejections never reach Redis.
		if !c.Floor && !c.FloodOnly && !strings.Contains(c.ID, "defaults") {
			deciding = append(deciding, c)
		}
	}
	if len(deciding) == 0 {
		return nil, nil
	}
	run := func(limit int, window time.Duration, fill bool) ([]cellResult, error) {
		if err := e.admin.FlushDB(ctx).Err(); err != nil {
			return nil, fmt.Errorf("FLUSHDB: %w", err)
		}
		deciders := make([]decider, len(deciding))
		for i, c := range deciding {
			rdb := c.Client.newClient(e.srv.Addr)
			defer rdb.Close()
			d, err := c.New(rdb, limit, window)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.ID, err)
			}
			if fill {
				for _, k := range e.keys {
					if _, err := d(ctx, k); err != nil {
						return nil, fmt.Errorf("%s: filling %s: %w", c.ID, k, err)
					}
				}
			}
			deciders[i] = d
		}
		return e.interleave(ctx, deciding, deciders, scriptCostCallers, e.keys)
	}
	admit, err := run(e.cfg.limit, e.cfg.window, false)
	if err != nil {
		return nil, fmt.Errorf("admit path: %w", err)
	}
	reject, err := run(1, rejectWindow, true)
	if err != nil {
		return nil, fmt.Errorf("reject path: %w", err)
	}
	out := make([]scriptCost, len(deciding))
	for i, c := range deciding {
		out[i] = scriptCost{Case: c, Admit: admit[i], Reject: reject[i],
			AdmitDenied: admit[i].Run.Denied(), RejectAdmitted: reject[i].Run.Allowed}
	}
	return out, nil
}

func renderScriptCost(w writer, costs []scriptCost, cfg config) {
	w("## Redis µs per call: admit and reject paths\n\n")
	w("Each deciding case at %d callers, on an emptied database, in interleaved rounds (as the throughput cells, %v per case and path): "+
		"the **admit** path with the throughput rule (%d per %v, never reached), and the **reject** path with a limit of 1 per %v "+
		"on keys that each got one request first, so every measured call is rejected. "+
		"µs/call is the usec_per_call of EVALSHA in INFO commandstats after CONFIG RESETSTAT (the time Redis spends in the script); "+
		"÷ seeds divides it by the seeds' recipe's on the same path. "+
		"The ceiling is 1e6 ÷ µs/call: the decisions per second one Redis could make doing nothing else, a physical bound (Redis runs one script at a time) that the network and the clients lower further.\n\n",
		scriptCostCallers, cfg.duration, cfg.limit, cfg.window, rejectWindow)
	var seeds *scriptCost
	for i := range costs {
		if costs[i].Case.ID == "seeds" {
			seeds = &costs[i]
		}
	}
	perCall := func(c cellResult) (float64, bool) { return c.ServerUsecPerCall() }
	cell := func(c cellResult, base *cellResult) (v, ratio, ceiling string) {
		us, ok := perCall(c)
		if !ok || us <= 0 {
			return "–", "–", "–"
		}
		v, ceiling, ratio = fmt.Sprintf("%.2f", us), fmt.Sprintf("%.0f", 1e6/us), "–"
		if base != nil {
			if b, ok := perCall(*base); ok && b > 0 {
				ratio = fmt.Sprintf("%.2f", us/b)
			}
		}
		return v, ratio, ceiling
	}
	w("| case | admit µs/call | ÷ seeds | ceiling, decisions/s | reject µs/call | ÷ seeds | ceiling, decisions/s | wrong outcomes |\n|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, c := range costs {
		var ba, br *cellResult
		if seeds != nil {
			ba, br = &seeds.Admit, &seeds.Reject
		}
		av, ar, ac := cell(c.Admit, ba)
		rv, rr, rc := cell(c.Reject, br)
		wrong := "0"
		if c.AdmitDenied > 0 || c.RejectAdmitted > 0 || c.Admit.Run.NonDecisions > 0 || c.Reject.Run.NonDecisions > 0 {
			wrong = fmt.Sprintf("**admit path: %d rejected, %d non-decisions; reject path: %d admitted, %d non-decisions**",
				c.AdmitDenied, c.Admit.Run.NonDecisions, c.RejectAdmitted, c.Reject.Run.NonDecisions)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Case.Name, av, ar, ac, rv, rr, rc, wrong)
	}
	w("\n")
}
