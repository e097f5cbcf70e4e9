// Command simulate replays one bursty request timeline through each of
// ginlimit's algorithms (sliding log, sliding counter, fixed window, token
// bucket) under the same rule, 10 requests per 1 s window, and draws what
// each one admitted and rejected as an SVG chart:
//
//	go run ./example/simulate -out docs/algorithms.svg
//
// It needs no Redis: the decisions are taken by ginlimit's real Lua scripts
// on an embedded miniredis, whose clock (Redis TIME) the simulation moves
// with SetTime, so the run is deterministic and takes well under a second.
// The deny cache is off ([ginlimit.DenyCache](0)): it times its answers
// with the local clock, which SetTime does not move.
//
// The chart shows, per algorithm, requests per 100 ms (admitted and
// rejected) and the number admitted in the last second against the limit.
// A text table of the totals is printed to stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", filepath.Join("docs", "algorithms.svg"), "where to write the SVG chart; its folder is created")
	seed := flag.Uint64("seed", DefaultSeed, "seed of the timeline's random arrivals")
	flag.Parse()
	if err := run(context.Background(), *out, *seed, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

// run simulates the timeline of seed, writes the chart to out and prints the
// totals to w.
func run(ctx context.Context, out string, seed uint64, w io.Writer) error {
	tl := NewTimeline(seed)
	results, err := Simulate(ctx, tl)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create the chart's folder: %w", err)
	}
	if err := os.WriteFile(out, RenderSVG(tl, results), 0o644); err != nil {
		return fmt.Errorf("write the chart: %w", err)
	}
	if err := WriteTable(w, tl, results); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nwrote %s\n", out)
	return err
}
