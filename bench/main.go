// Command bench measures ginlimit against the seeds' recipe and its peers
// (go-redis/redis_rate and ulule/limiter) on a redis-server that it starts
// itself, and prints a markdown report.
//
//	cd bench && go run . -quick          # about 40 s
//	cd bench && go run . -out RESULTS.md # the full run, about 6 minutes on 2 cores
//	go run -C bench . -cases ginlimit,redis_rate,http
//
// It is a module of its own so that the peer libraries never enter
// ginlimit's go.mod. Every case runs against the same server, each on a
// fresh go-redis client of its kind (ContextTimeoutEnabled, or plain for the
// plain-client case), on an emptied database (FLUSHDB: the server is the
// harness's own, on a free loopback port; no other Redis is touched).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is the parsed command line.
type config struct {
	quick         bool
	duration      time.Duration // measured per throughput cell, over all its rounds
	rounds        int           // the rounds a cell's time is split into
	warmup        time.Duration // per case and concurrency, before its first round
	out           string
	cases         string
	limit         int
	window        time.Duration
	keys          int
	callers       []int
	httpCallers   []int // concurrent HTTP clients of the end-to-end comparison
	floodN        int64
	httpBenchtime time.Duration
	redisServer   string
	args          []string // as given, for the report
}

// env is what the measurements share: the server, an admin client for
// FLUSHDB, CONFIG RESETSTAT and INFO, the keys and the caller states.
type env struct {
	cfg     config
	srv     *redisServer
	admin   *redis.Client
	keys    []string
	workers *workers
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg := config{args: args}
	var callers, httpCallers string
	fs.BoolVar(&cfg.quick, "quick", false, "short cells, a smaller flood and short HTTP benchmarks: the whole run takes about a minute")
	fs.DurationVar(&cfg.duration, "duration", 0, "measured time per throughput cell (case and concurrency), over all rounds (default 5s, or 400ms with -quick)")
	fs.IntVar(&cfg.rounds, "rounds", 0, "rounds each cell's time is split into; every round runs every case, interleaved (default 10, or 4 with -quick)")
	fs.StringVar(&cfg.out, "out", "", "also write the report to `file`")
	fs.StringVar(&cfg.cases, "cases", "", "comma-separated cases to run (default all): "+caseIDs())
	fs.IntVar(&cfg.limit, "limit", 1000, "limit per window of the throughput and HTTP cases")
	fs.DurationVar(&cfg.window, "window", time.Second, "window of the throughput and HTTP cases")
	fs.IntVar(&cfg.keys, "keys", 1000, "number of keys the throughput cases spread over uniformly")
	fs.StringVar(&callers, "callers", "1,32,256,1024", "comma-separated numbers of concurrent callers of the decision cases")
	fs.StringVar(&httpCallers, "http-callers", "1,32,256", "comma-separated numbers of concurrent clients of the end-to-end HTTP comparison")
	fs.Int64Var(&cfg.floodN, "flood-n", 0, "decisions in each flood (default 100000, or 20000 with -quick)")
	fs.DurationVar(&cfg.httpBenchtime, "http-benchtime", 0, "testing.Benchmark time per HTTP benchmark (default 2s, or 300ms with -quick)")
	fs.StringVar(&cfg.redisServer, "redis-server", "redis-server", "redis-server binary")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.callers, err = parseCounts("-callers", callers); err != nil {
		return config{}, err
	}
	if cfg.httpCallers, err = parseCounts("-http-callers", httpCallers); err != nil {
		return config{}, err
	}
	cfg.warmup = 500 * time.Millisecond
	if cfg.quick {
		cfg.warmup = 100 * time.Millisecond
	}
	cfg.duration = pick(cfg.duration, cfg.quick, 400*time.Millisecond, 5*time.Second)
	cfg.rounds = pick(cfg.rounds, cfg.quick, 4, 10)
	cfg.floodN = pick(cfg.floodN, cfg.quick, 20_000, 100_000)
	cfg.httpBenchtime = pick(cfg.httpBenchtime, cfg.quick, 300*time.Millisecond, 2*time.Second)
	switch {
	case cfg.limit < 1:
		return config{}, fmt.Errorf("-limit %d: must be at least 1", cfg.limit)
	case cfg.window < time.Millisecond:
		return config{}, fmt.Errorf("-window %v: must be at least 1ms", cfg.window)
	case cfg.keys < 1:
		return config{}, fmt.Errorf("-keys %d: must be at least 1", cfg.keys)
	case cfg.rounds < 1:
		return config{}, fmt.Errorf("-rounds %d: must be at least 1", cfg.rounds)
	case cfg.duration <= 0 || cfg.floodN < floodLimit || cfg.httpBenchtime <= 0:
		return config{}, errors.New("-duration, -flood-n and -http-benchtime must be positive (and -flood-n at least the flood's limit)")
	}
	if _, _, err := selectCases(cfg.cases); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// parseCounts parses a comma-separated list of positive numbers.
func parseCounts(flagName, list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// pick returns v when it was given (non-zero), else the mode's default.
func pick[T comparable](v T, quick bool, quickDefault, fullDefault T) T {
	var zero T
	switch {
	case v != zero:
		return v
	case quick:
		return quickDefault
	}
	return fullDefault
}

func caseIDs() string {
	var ids []string
	for _, c := range allCases() {
		ids = append(ids, c.ID)
	}
	return strings.Join(append(ids, "http"), ",")
}

func run(cfg config) error {
	cases, withHTTP, err := selectCases(cfg.cases)
	if err != nil {
		return err
	}
	// testing.Benchmark reads its run time from the testing flags.
	testing.Init()
	if err := flag.CommandLine.Set("test.benchtime", cfg.httpBenchtime.String()); err != nil {
		return err
	}

	started := time.Now()
	srv, err := startRedis(cfg.redisServer)
	if err != nil {
		return err
	}
	defer srv.stop()
	// On Ctrl-C or SIGTERM, stop the server before exiting.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		srv.stop()
		fmt.Fprintf(os.Stderr, "bench: %v: redis-server stopped\n", s)
		os.Exit(130)
	}()
	progress("redis-server %s on %s", srv.Version, srv.Addr)

	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer admin.Close()
	e := &env{cfg: cfg, srv: srv, admin: admin, workers: newWorkers(max(slicesMax(cfg.callers), slicesMax(cfg.httpCallers), floodCallers))}
	for i := range cfg.keys {
		e.keys = append(e.keys, "k:"+strconv.Itoa(i))
	}

	res, err := e.measureAll(context.Background(), cases, withHTTP)
	if err != nil {
		return err
	}
	res.total = time.Since(started)
	report := renderReport(e, res)
	if _, err := os.Stdout.WriteString(report); err != nil {
		return err
	}
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		progress("report written to %s", cfg.out)
	}
	return nil
}

func slicesMax(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// progress writes a line to stderr, so the report on stdout stays clean.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// results is everything the report shows.
type results struct {
	cells  []cellResult
	costs  []scriptCost
	memory []memoryResult
	floods []floodResult
	http   []httpResult
	e2e    []cellResult // the end-to-end HTTP comparison
	total  time.Duration
}

// measureAll runs every section for the selected cases, one after another.
func (e *env) measureAll(ctx context.Context, cases []*benchCase, withHTTP bool) (*results, error) {
	res := &results{}
	throughput, costed := splitCases(cases)
	var err error
	if res.cells, err = e.measureThroughputSection(ctx, throughput); err != nil {
		return nil, err
	}
	if res.costs, err = e.measureCostSection(ctx, costed); err != nil {
		return nil, err
	}
	if res.memory, err = e.measureMemorySection(ctx, cases); err != nil {
		return nil, err
	}
	if res.floods, err = e.measureFloodSection(ctx, cases); err != nil {
		return nil, err
	}
	if withHTTP {
		if res.http, res.e2e, err = e.measureHTTPSections(ctx); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// splitCases returns the cases of the throughput tables and those of the
// script-cost section, in the order of cases.
func splitCases(cases []*benchCase) (throughput, costed []*benchCase) {
	for _, c := range cases {
		if !c.FloodOnly && !c.CostOnly {
			throughput = append(throughput, c)
		}
		if !c.FloodOnly {
			costed = append(costed, c)
		}
	}
	return throughput, costed
}

// measureThroughputSection measures the throughput cells of cases at each
// concurrency of -callers.
func (e *env) measureThroughputSection(ctx context.Context, cases []*benchCase) ([]cellResult, error) {
	var all []cellResult
	for _, n := range e.cfg.callers {
		if len(cases) == 0 {
			break
		}
		cells, err := e.measureThroughput(ctx, cases, n)
		if err != nil {
			return nil, fmt.Errorf("%d callers: %w (redis-server: %v)", n, err, e.srv.alive())
		}
		for _, cell := range cells {
			progress("%-25s %4d callers: %8.0f decisions/s, p50 %8.1f µs, %d non-decisions, CPU client/redis/others %v",
				cell.Case.ID, n, cell.Run.PerSec(), us(cell.Run.Hist.quantile(0.5)), cell.Run.NonDecisions, cell.CPU.use())
		}
		all = append(all, cells...)
	}
	return all, nil
}

// measureCostSection measures the Redis time per call of cases on the admit
// and reject paths; nil when there are none.
func (e *env) measureCostSection(ctx context.Context, cases []*benchCase) ([]scriptCost, error) {
	if len(cases) == 0 {
		return nil, nil
	}
	costs, err := e.measureScriptCost(ctx, cases)
	if err != nil {
		return nil, fmt.Errorf("script cost: %w (redis-server: %v)", err, e.srv.alive())
	}
	for _, c := range costs {
		a, _ := c.Admit.ServerUsecPerCall()
		r, _ := c.Reject.ServerUsecPerCall()
		progress("%-25s Redis µs/call: admit %.2f, reject %.2f", c.Case.ID, a, r)
	}
	return costs, nil
}

// measureMemorySection measures the memory of one key of each Memory case at
// each limit of the memory table.
func (e *env) measureMemorySection(ctx context.Context, cases []*benchCase) ([]memoryResult, error) {
	var all []memoryResult
	for _, c := range cases {
		if !c.Memory {
			continue
		}
		for _, limit := range []int{100, 1_000, 10_000} {
			m, err := measureMemory(ctx, e.admin, e.srv.Addr, c, limit)
			if err != nil {
				return nil, e.caseErr(c, fmt.Sprintf("memory at limit %d", limit), err)
			}
			progress("%-25s memory at limit %d: %d bytes", c.ID, limit, m.Bytes)
			all = append(all, m)
		}
	}
	return all, nil
}

// measureFloodSection runs the flood of each Flood case.
func (e *env) measureFloodSection(ctx context.Context, cases []*benchCase) ([]floodResult, error) {
	var all []floodResult
	for _, c := range cases {
		if !c.Flood {
			continue
		}
		f, err := flood{admin: e.admin, addr: e.srv.Addr, workers: e.workers}.run(ctx, c, e.cfg.floodN)
		if err != nil {
			return nil, e.caseErr(c, "flood", err)
		}
		progress("%-25s flood: %d admitted, %d script calls", c.ID, f.Run.Allowed, f.ScriptCalls)
		all = append(all, f)
	}
	return all, nil
}

// caseErr wraps err of case c's measurement of what, with the state of
// redis-server.
func (e *env) caseErr(c *benchCase, what string, err error) error {
	return fmt.Errorf("%s, %s: %w (redis-server: %v)", c.ID, what, err, e.srv.alive())
}

// measureHTTPSections runs the HTTP benchmarks, with real Redis then with
// a canned reply, and the end-to-end HTTP comparison.
func (e *env) measureHTTPSections(ctx context.Context) ([]httpResult, []cellResult, error) {
	var hs []httpResult
	for _, canned := range []bool{false, true} {
		h, err := e.benchHTTP(ctx, canned)
		if err != nil {
			return nil, nil, fmt.Errorf("http (canned reply %v): %w", canned, err)
		}
		progress("http %s: bare %d ns/op, limited %d ns/op", h.Env, h.Bare.NsPerOp(), h.Limited.NsPerOp())
		hs = append(hs, h)
	}
	cells, err := e.measureEndToEnd(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("http end to end: %w (redis-server: %v)", err, e.srv.alive())
	}
	return hs, cells, nil
}

// us converts d to microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
