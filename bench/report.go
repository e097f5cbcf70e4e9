package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// renderReport returns the markdown report of a run.
func renderReport(e *env, res *results) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cfg := e.cfg

	w("# ginlimit benchmark\n\n")
	w("- **Machine:** nproc %d (GOMAXPROCS %d), %s, %s/%s. The machine is shared and noisy, and the client and redis-server share its CPUs.\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel(), runtime.GOOS, runtime.GOARCH)
	w("- **Go:** %s\n", runtime.Version())
	w("- **Redis:** redis-server %s, started by the harness on %s with `--save \"\" --appendonly no`\n", e.srv.Version, e.srv.Addr)
	w("- **Date:** %s\n", time.Now().UTC().Format("2006-01-02 15:04:05 MST"))
	w("- **Command:** `%s` (in bench/; the same as `go run -C bench .%s` from the repository root); the run took %.1f s\n",
		command(cfg.args), argsSuffix(cfg.args), res.total.Seconds())
	w("- **Code:** %s\n", versions())
	w("- **Settings:** limit %d per %v window; keys k:0..k:%d chosen uniformly; %v measured per cell (case × concurrency) in %d interleaved rounds "+
		"(every round runs every case once, the order rotated by one case each round), after a %v warm-up; FLUSHDB before each concurrency\n",
		cfg.limit, cfg.window, cfg.keys-1, cfg.duration, cfg.rounds, cfg.warmup)
	w("- **Clients:** each case on a go-redis client of its own, with go-redis's default pool (%d connections here): %s\n",
		10*runtime.GOMAXPROCS(0), clientsText(res))
	w("- **Non-decisions:** a call whose answer did not come from the limiter's store is not counted in decisions/s or req/s but in a column of its own: " +
		"for ginlimit, an error, a decision of the FailLocal fallback (`Decision.Local`) or a failed-open answer (ErrSaturated, " +
		"when this process could not get the call to Redis in time, is one of these, and counted as such); for a peer, an error\n")
	w("- **Read ratios, not absolute figures:** the machine is shared and its other load moves absolute figures by ±30 %% between runs; " +
		"the ÷ columns compare cases measured in the same interleaved rounds, and are what carries over\n\n")

	if len(res.cells) > 0 {
		renderThroughput(w, res.cells)
	}
	if len(res.costs) > 0 {
		renderScriptCost(w, res.costs, cfg)
	}
	if len(res.memory) > 0 {
		renderMemory(w, res.memory)
	}
	if len(res.floods) > 0 {
		renderFlood(w, res.floods, cfg.floodN)
	}
	if len(res.http) > 0 {
		renderHTTP(w, res.http, cfg)
	}
	if len(res.e2e) > 0 {
		renderEndToEnd(w, res.e2e, cfg)
	}
	renderCases(w, res)
	return b.String()
}

type writer func(format string, args ...any)

// renderThroughput renders the throughput section: one table per
// concurrency, the ratios, the 1-caller latencies against the no-op and
// where the Redis time goes.
func renderThroughput(w writer, cells []cellResult) {
	callers := cellCallers(cells)
	renderThroughputIntro(w)
	for _, n := range callers {
		renderThroughputTable(w, cells, n)
	}
	renderRatios(w, cells, callers)
	renderNoopLatency(w, cells)
	renderRedisTime(w, cells, callers[0])
}

// findCell returns the cell of case id at callers, or nil.
func findCell(cells []cellResult, id string, callers int) *cellResult {
	for i := range cells {
		if cells[i].Case.ID == id && cells[i].Callers == callers {
			return &cells[i]
		}
	}
	return nil
}

// cellCallers returns the concurrencies of cells, in their order.
func cellCallers(cells []cellResult) []int {
	var callers []int
	for _, c := range cells {
		if !slices.Contains(callers, c.Callers) {
			callers = append(callers, c.Callers)
		}
	}
	return callers
}

// renderThroughputIntro renders the section's heading and what its columns
// mean.
func renderThroughputIntro(w writer) {
	w("## Decisions: throughput, latency, allocations, Redis time\n\n")
	w("Every decision is admitted (the limit is never reached at these rates), so this is the cost of one decision. "+
		"÷ redis_rate and ÷ seeds are the case's decisions/s divided by theirs at the same concurrency. "+
		"Allocations are the whole process's heap allocations (runtime.MemStats.Mallocs) during the run, per decision. "+
		"p50 and p99 are over every call, and allocations and the Redis columns per decision divide by every call: non-decisions included, so a non-decision's wait is not hidden. "+
		"Redis µs/call is usec_per_call of the case's command (EVALSHA; PING for the PING floor) in INFO commandstats after CONFIG RESETSTAT; "+
		"Redis calls/decision and µs/decision count the commands a client sends (EVALSHA, EVAL, PING, MULTI, EXEC) per decision.[^stats] "+
		"CPU is the share of one core used during the cell by this process (the client), by redis-server and by everything else on the machine (other processes, and hypervisor steal), from /proc; "+
		"the machine has %d cores in all. "+
		"At 1 caller the client and redis-server sleep between calls, so a round trip includes waking idle CPUs and moves with the machine's other load; "+
		"at %d connections and beyond, the client's pool is the queue, and latency includes waiting for a connection.\n\n", runtime.NumCPU(), 10*runtime.GOMAXPROCS(0))
}

// renderThroughputTable renders the table of the cells at n callers.
func renderThroughputTable(w writer, cells []cellResult, n int) {
	rr, seeds := findCell(cells, "redis_rate", n), findCell(cells, "seeds", n)
	w("### %d caller%s\n\n", n, plural(n))
	w("| case | decisions/s | ÷ redis_rate | ÷ seeds | p50 µs | p99 µs | allocs/decision | Redis µs/call | Redis calls/decision | Redis µs/decision | denied | non-decisions | CPU %% client / redis / others |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range cells {
		if c.Callers != n {
			continue
		}
		perCall := "–"
		if v, ok := c.ServerUsecPerCall(); ok {
			perCall = fmt.Sprintf("%.2f", v)
		}
		calls, usec := c.ServerPerCall()
		denied := c.Run.Denied()
		if c.Case.Floor {
			denied = 0
		}
		w("| %s | %.0f | %s | %s | %.1f | %.1f | %.2f | %s | %.3f | %.2f | %d | %s | %v |\n",
			c.Case.Name, c.Run.PerSec(), ratio(c, rr), ratio(c, seeds),
			us(c.Run.Hist.quantile(0.5)), us(c.Run.Hist.quantile(0.99)), c.AllocsPerCall(),
			perCall, calls, usec, denied, nonDecisionText(c.Run), c.CPU.use())
	}
	w("\n")
}

// renderNoopLatency renders the 1-caller p50 latencies against the EVALSHA
// no-op's (and the raw sliding-log script's, when it ran), when the no-op ran.
func renderNoopLatency(w writer, cells []cellResult) {
	noop := findCell(cells, "noop", 1)
	if noop == nil {
		return
	}
	base := noop.Run.Hist.quantile(0.5)
	w("### 1 caller: p50 latency against the EVALSHA no-op\n\n")
	raw := findCell(cells, "ginlimit-script", 1)
	if raw == nil {
		w("| case | p50 µs | ÷ EVALSHA `return 1` p50 (%.1f µs) |\n|---|--:|--:|\n", us(base))
	} else {
		w("The last column splits a ginlimit sliding-log case's latency: its p50 over that of the same script called raw " +
			"is ginlimit's own share; the raw script's over the no-op is the script's.\n\n")
		w("| case | p50 µs | ÷ EVALSHA `return 1` p50 (%.1f µs) | ÷ the sliding-log script raw (%.1f µs) |\n|---|--:|--:|--:|\n",
			us(base), us(raw.Run.Hist.quantile(0.5)))
	}
	for _, c := range cells {
		if c.Callers != 1 {
			continue
		}
		p50 := c.Run.Hist.quantile(0.5)
		w("| %s | %.1f | %.2f |", c.Case.Name, us(p50), float64(p50)/float64(base))
		if raw != nil {
			own := "–"
			if strings.HasPrefix(c.Case.Name, "ginlimit sliding log") {
				own = fmt.Sprintf("%.2f", float64(p50)/float64(raw.Run.Hist.quantile(0.5)))
			}
			w(" %s |", own)
		}
		w("\n")
	}
	w("\n")
}

// renderRedisTime renders where each case's Redis time goes at n callers:
// the script's time, the commands it runs, and the difference.
func renderRedisTime(w writer, cells []cellResult, n int) {
	w("### Where the Redis time goes (%d caller%s)\n\n", n, plural(n))
	w("Commands that a script runs are counted in commandstats as commands of their own, and their time is inside the script's. " +
		"Each entry is calls per decision × µs per call. Script overhead = the script's µs per decision − its commands' µs per decision: " +
		"the cost of running the Lua itself (argument parsing, string building, calls into Redis, the reply).\n\n")
	w("| case | script µs/decision | commands inside, per decision | commands µs/decision | script overhead µs/decision |\n|---|--:|---|--:|--:|\n")
	for _, c := range cells {
		if c.Callers != n || c.Case.ID == "ping" {
			continue
		}
		calls := float64(max(1, c.Run.Calls))
		script := float64(c.Stats["evalsha"].Usec+c.Stats["eval"].Usec) / calls
		inside, innerUsec := innerCommandsText(c.Stats, calls)
		w("| %s | %.2f | %s | %.2f | %.2f |\n", c.Case.Name, script, orDash(inside),
			float64(innerUsec)/calls, script-float64(innerUsec)/calls)
	}
	w("\n[^stats]: All four libraries send exactly one EVALSHA per decision (ulule/limiter v3.11's Redis store included: " +
		"it runs an INCRBY/PEXPIRE script, not MULTI), so no MULTI/EXEC sums were needed; " +
		"the commands a script runs are not added, because their time is already in the script's.\n\n")
}

// innerCommandsText returns the commands that scripts ran, in name order,
// each as calls per decision (of calls decisions) × µs per call, and their
// µs in all.
func innerCommandsText(stats cmdStats, calls float64) (string, int64) {
	in := stats.inner()
	names := make([]string, 0, len(in))
	var innerUsec int64
	for name, st := range in {
		names = append(names, name)
		innerUsec += st.Usec
	}
	slices.Sort(names)
	var parts []string
	for _, name := range names {
		st := in[name]
		parts = append(parts, fmt.Sprintf("%s %.3f × %.2f", name, float64(st.Calls)/calls, float64(st.Usec)/float64(max(1, st.Calls))))
	}
	return strings.Join(parts, ", "), innerUsec
}

func ratio(c cellResult, base *cellResult) string {
	if base == nil || base.Run.PerSec() == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", c.Run.PerSec()/base.Run.PerSec())
}

// nonDecisionText is a cell's non-decisions: how many, how many of them were
// ErrSaturated, and the first error.
func nonDecisionText(r runResult) string {
	if r.NonDecisions == 0 {
		return "0"
	}
	sat := ""
	if r.Saturated > 0 {
		sat = fmt.Sprintf("%d ErrSaturated; ", r.Saturated)
	}
	return fmt.Sprintf("**%d** (%.2f %%; %sfirst: %v)", r.NonDecisions, 100*float64(r.NonDecisions)/float64(max(1, r.Calls)), sat, r.FirstErr)
}

// renderRatios is the summary of the throughput tables: every case's
// decisions/s ÷ redis_rate's, one column per concurrency.
func renderRatios(w writer, cells []cellResult, callers []int) {
	rate := map[int]float64{}
	for _, c := range cells {
		if c.Case.ID == "redis_rate" {
			rate[c.Callers] = c.Run.PerSec()
		}
	}
	if len(rate) == 0 {
		return
	}
	w("### decisions/s ÷ redis_rate at each concurrency\n\n| case | client |")
	for _, n := range callers {
		w(" %d caller%s |", n, plural(n))
	}
	w("\n|---|---|%s\n", strings.Repeat("--:|", len(callers)))
	var order []*benchCase
	for _, c := range cells {
		if !slices.Contains(order, c.Case) {
			order = append(order, c.Case)
		}
	}
	for _, bc := range order {
		w("| %s | %s |", bc.Name, bc.Client.Short())
		for _, n := range callers {
			v := "–"
			for _, c := range cells {
				if c.Case == bc && c.Callers == n && rate[n] > 0 {
					v = fmt.Sprintf("%.2f", c.Run.PerSec()/rate[n])
				}
			}
			w(" %s |", v)
		}
		w("\n")
	}
	w("\n")
}

// clientsText says which client options each case uses, from the cases that
// ran: the plain-client cases by name, then every other one.
func clientsText(res *results) string {
	var plain []string
	seen := map[string]bool{}
	add := func(c *benchCase) {
		if c.Client == plainClient && !seen[c.ID] {
			seen[c.ID] = true
			plain = append(plain, "\""+c.Name+"\"")
		}
	}
	for _, c := range res.cells {
		add(c.Case)
	}
	for _, f := range res.floods {
		add(f.Case)
	}
	for _, c := range res.e2e {
		add(c.Case)
	}
	others := "every case"
	if len(plain) > 0 {
		others = "every other case"
	}
	text := fmt.Sprintf("%s for %s: the floors, the seeds' recipe, the peers (the hand-written redis_rate HTTP middleware too), "+
		"the other ginlimit variants and the in-process HTTP benchmark", ctxTimeoutClient, others)
	if len(plain) > 0 {
		text = fmt.Sprintf("%s (plain) for %s; %s", plainClient, strings.Join(plain, " and "), text)
	}
	return text + ". Each case's client is also in the tables or under The cases. The harness's own commands (FLUSHDB, CONFIG RESETSTAT, INFO) use a client of their own"
}

func renderMemory(w writer, mem []memoryResult) {
	w("## Redis memory per active key\n\n")
	w("One fresh key, sent exactly `limit` requests one after another (window %v, so nothing leaves it), then `MEMORY USAGE key SAMPLES 0` "+
		"(every element counted) and `OBJECT ENCODING key`. Bytes per entry is usage ÷ limit, for the cases that keep an entry per admitted request (the logs).\n\n", memoryWindow)
	w("| case | what it keeps | Redis key | limit | admitted | MEMORY USAGE bytes | encoding | bytes per entry |\n|---|---|---|--:|--:|--:|---|--:|\n")
	for _, m := range mem {
		perEntry := "–"
		if m.Case.Log {
			perEntry = fmt.Sprintf("%.2f", m.PerEntry())
		}
		admitted := fmt.Sprint(m.Admitted)
		if m.Admitted != int64(m.Limit) {
			admitted = fmt.Sprintf("**%d**", m.Admitted)
		}
		w("| %s | %s | `%s` | %d | %s | %d | %s | %s |\n", m.Case.Name, m.Case.Algorithm, m.Key, m.Limit, admitted, m.Bytes, m.Encoding, perEntry)
	}
	w("\n")
	// Hash fields per case, in the table's order: "name: 1 at limit 100, 2 at limit 10000".
	var hashes []string
	at := map[*benchCase]int{}
	for _, m := range mem {
		if m.Type != "hash" {
			continue
		}
		entry := fmt.Sprintf("%d at limit %d", m.Fields, m.Limit)
		if i, ok := at[m.Case]; ok {
			hashes[i] += ", " + entry
			continue
		}
		at[m.Case] = len(hashes)
		hashes = append(hashes, m.Case.Name+": "+entry)
	}
	if len(hashes) > 0 {
		w("For a counter, a fixed window or a bucket, full means `limit` admitted requests; what it keeps does not grow with them, only the numbers in it get longer. "+
			"Hash fields (HLEN) of the hash-based keys: %s. "+
			"A fixed window keeps two fields (the window's start and its count); "+
			"a sliding counter keeps one per sub-window that admitted something and is still counted: "+
			"one or two here, where each key was filled in well under one sub-window (%v), and up to 10 for a key busy through its whole window.\n\n",
			strings.Join(hashes, "; "), memoryWindow/ginlimit.DefaultSubWindows)
	}
}

func renderFlood(w writer, floods []floodResult, total int64) {
	w("## Flood: %d decisions on one key, limit %d per %v, %d callers\n\n", total, floodLimit, floodWindow, floodCallers)
	w("Script calls are INFO commandstats calls of EVALSHA + EVAL after CONFIG RESETSTAT (the pool and scripts were warmed on another key first). " +
		"The rejected p50 is the median latency of the decisions that were answered no.\n\n")
	w("| case | admitted | expected | script calls seen by Redis | rejected | rejected p50 µs | rejected p99 µs | flood took s | decisions/s | non-decisions |\n")
	w("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, f := range floods {
		admitted := fmt.Sprint(f.Run.Allowed)
		if f.Case.Exact && !exactEnough(f) {
			admitted = fmt.Sprintf("**%d (NOT EXACT)**", f.Run.Allowed)
		}
		w("| %s | %s | %s | %d | %d | %.1f | %.1f | %.2f | %.0f | %s |\n",
			f.Case.Name, admitted, expectedAdmitted(f), f.ScriptCalls, f.Rejected(),
			us(f.Run.Hist.quantile(0.5)), us(f.Run.Hist.quantile(0.99)), f.Run.Elapsed.Seconds(), f.Run.PerSec(), nonDecisionText(f.Run))
	}
	w("\n")
}

func renderHTTP(w writer, hs []httpResult, cfg config) {
	w("## HTTP: the middleware's own cost per request\n\n")
	w("A gin engine (ReleaseMode, gin.New()) with `GET /r/:id`, served in process (ServeHTTP on a reused response writer and "+
		"%d prebuilt requests from %d client addresses), bare versus "+
		"`limiter.RateLimit(Key, Window(%v), Limit(%d), Type(IP))` on the route, with ginlimit's defaults, on a %s client. "+
		"One caller, testing.Benchmark (%v each). Overhead = limited − bare. "+
		"Without Redis, the go-redis call is measured alone too (Script.Run of the rule's script on the same client, with keys built beforehand), "+
		"and ginlimit's own cost is the overhead minus it: what the issue's goal (≤ 2 µs, ≤ 10 allocations) is about.\n\n",
		httpClients, httpClients, cfg.window, cfg.limit, ctxTimeoutClient.Short(), cfg.httpBenchtime)
	w("| decisions from | bare ns/op | bare allocs/op | bare B/op | limited ns/op | limited allocs/op | limited B/op | overhead µs/request | overhead allocs/request | overhead B/request | go-redis call µs | go-redis allocs | ginlimit's own µs | ginlimit's own allocs | non-200 | non-decisions |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var reply interface{}
	for _, h := range hs {
		if h.Reply != nil {
			reply = h.Reply
		}
		overhead, overheadAllocs := h.Limited.NsPerOp()-h.Bare.NsPerOp(), h.Limited.AllocsPerOp()-h.Bare.AllocsPerOp()
		goRedis, goRedisAllocs, own, ownAllocs := "–", "–", "–", "–"
		if h.GoRedis.N > 0 {
			goRedis, goRedisAllocs = fmt.Sprintf("%.2f", float64(h.GoRedis.NsPerOp())/1000), fmt.Sprint(h.GoRedis.AllocsPerOp())
			own, ownAllocs = fmt.Sprintf("%.2f", float64(overhead-h.GoRedis.NsPerOp())/1000), fmt.Sprint(overheadAllocs-h.GoRedis.AllocsPerOp())
		}
		w("| %s | %d | %d | %d | %d | %d | %d | %.2f | %d | %d | %s | %s | %s | %s | %d | %d |\n", h.Env,
			h.Bare.NsPerOp(), h.Bare.AllocsPerOp(), h.Bare.AllocedBytesPerOp(),
			h.Limited.NsPerOp(), h.Limited.AllocsPerOp(), h.Limited.AllocedBytesPerOp(),
			float64(overhead)/1000, overheadAllocs, h.Limited.AllocedBytesPerOp()-h.Bare.AllocedBytesPerOp(),
			goRedis, goRedisAllocs, own, ownAllocs, h.Non200, h.NonDecisions)
	}
	if reply != nil {
		w("\nThe canned reply is a real reply of the script to the route's first request, captured from the harness's Redis (`%q`: "+
			"the scripts reply one string of packed integers), copied on every call, "+
			"so \"excluding Redis\" still includes its allocation, which stands in for go-redis reading a real reply; "+
			"the go-redis call alone includes it too.\n", reply)
	}
	w("\n")
}

// renderEndToEnd is the end-to-end HTTP comparison, one table per
// concurrency.
func renderEndToEnd(w writer, cells []cellResult, cfg config) {
	w("## HTTP end to end: requests per second over loopback\n\n")
	w("The same gin engine (ReleaseMode, gin.New(), `SetTrustedProxies([\"%s\"])`) with `GET /r/:id` answering 200 \"ok\", "+
		"served by net/http on a loopback listener of its own: bare; behind `limiter.RateLimit(Key, Window(%v), Limit(%d), Type(IP), IPIdentity(identity.NewIP(\"%s\")), Respond(mark))` "+
		"on a limiter with nothing but `ginlimit.Redis(rdb)` (the defaults: deny cache on, FailLocal, DefaultTimeout and DefaultQueueTimeout; Respond and a handler after the limit mark a response Redis did not decide, "+
		"and marks the response so the client counts a non-decision); and behind a redis_rate middleware written by hand: "+
		"`limiter.Allow(ctx, \"e2e:\"+c.ClientIP(), redis_rate.PerSecond(%d))`, 429 when not allowed, 500 on an error. "+
		"ginlimit sets its five rate limit headers on every response, the hand-written middleware none. "+
		"The clients are in this process: each caller sends GET with `X-Forwarded-For` naming one of %d client addresses chosen uniformly "+
		"(every route counts per address, as the decision cases count per key) and reads the whole answer, on keep-alive connections (one http.Transport per route). "+
		"The routes are measured like the decision cases: %v per cell in %d interleaved rounds with the order rotated each round, FLUSHDB before each concurrency. "+
		"req/s counts the answers that were decisions (200 or 429); ÷ bare and ÷ redis_rate divide it by theirs at the same concurrency; "+
		"p50 and p99 are each request's time as the client sees it. CPU client is this whole process: clients, servers and limiters.\n\n",
		trustedProxy, cfg.window, cfg.limit, trustedProxy, cfg.limit, httpClients, cfg.duration, cfg.rounds)
	var levels []int
	for _, c := range cells {
		if !slices.Contains(levels, c.Callers) {
			levels = append(levels, c.Callers)
		}
	}
	for _, n := range levels {
		var bare, rr *cellResult
		for i := range cells {
			if cells[i].Callers == n {
				switch cells[i].Case.ID {
				case "http-bare":
					bare = &cells[i]
				case "http-redis_rate":
					rr = &cells[i]
				}
			}
		}
		w("### %d client%s\n\n", n, plural(n))
		w("| route | Redis client | req/s | ÷ bare | ÷ redis_rate | p50 µs | p99 µs | allocs/request | Redis calls/request | 429s | non-decisions | CPU %% client / redis / others |\n")
		w("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, c := range cells {
			if c.Callers != n {
				continue
			}
			client := c.Case.Client.Short()
			if c.Case.Algorithm == "none" {
				client = "–"
			}
			calls, _ := c.ServerPerCall()
			w("| %s | %s | %.0f | %s | %s | %.1f | %.1f | %.1f | %.3f | %d | %s | %v |\n",
				c.Case.Name, client, c.Run.PerSec(), ratio(c, bare), ratio(c, rr),
				us(c.Run.Hist.quantile(0.5)), us(c.Run.Hist.quantile(0.99)), c.AllocsPerCall(), calls,
				c.Run.Denied(), nonDecisionText(c.Run), c.CPU.use())
		}
		w("\n")
	}
}

func renderCases(w writer, res *results) {
	seen := map[string]bool{}
	var notes []string
	add := func(c *benchCase) {
		if c.Note != "" && !seen[c.ID] {
			seen[c.ID] = true
			notes = append(notes, fmt.Sprintf("- **%s** (client: %s): %s", c.Name, c.Client.Short(), c.Note))
		}
	}
	for _, c := range res.cells {
		add(c.Case)
	}
	for _, f := range res.floods {
		add(f.Case)
	}
	if len(notes) == 0 {
		return
	}
	w("## The cases\n\n%s\n", strings.Join(notes, "\n"))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "CPU model unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "CPU model unknown"
}

// command returns the command line as typed: "go run ." for a binary that
// go run built, else the binary's name, then the arguments, quoted for a
// shell where needed.
func command(args []string) string {
	name := os.Args[0]
	if strings.Contains(name, "go-build") {
		name = "go run ."
	}
	return name + argsSuffix(args)
}

func argsSuffix(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t\"'$\\`*?[]{}()<>|&;") {
			b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// versions lists the modules under test and ginlimit's git state.
func versions() string {
	var parts []string
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/go-redis/v9", "github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3", "github.com/gin-gonic/gin":
				parts = append(parts, d.Path+" "+d.Version)
			}
		}
	}
	slices.Sort(parts)
	gl := "ginlimit from the working tree (../)"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		gl += " at commit " + strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--", "../ginlimit", "../lua").Output(); err == nil && len(st) > 0 {
			gl += " with uncommitted changes in ginlimit/ or lua/"
		}
	}
	return strings.Join(append([]string{gl}, parts...), "; ")
}
