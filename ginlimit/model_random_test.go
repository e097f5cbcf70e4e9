package ginlimit

// Random request timelines run through each script, on miniredis and on a
// real redis-server, and through its reference model in model_test.go; every
// decision must match (TestModelRandom*). On the same timelines and models:
// what retry_us promises (TestModelRetryFits), the token bucket's burst
// (TestModelTokenBucketBurstAfterQuietSpell), and the sliding counter's
// worst case and error against the exact log (TestModelSlidingCounter*).
//
// Each case has a fixed seed, logged, so a failure reproduces; -model.seed
// overrides every case's seed and -model.scale multiplies the steps, to
// search further:
//
//	go test -race -count=1 -run 'ModelRandom' -model.seed=12345 -model.scale=10 ./ginlimit

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
	"github.com/ginlimit/ginlimit/lua"
)

var (
	modelSeedFlag  = flag.Uint64("model.seed", 0, "the seed of every random model timeline; 0 means each case's own fixed seed")
	modelScaleFlag = flag.Float64("model.scale", 1, "multiplies the steps of every random model timeline")
)

// modelCounterMiniScale is the share of its steps a sliding counter case
// runs on miniredis, whose Lua (a new interpreter per call) costs about 1 ms
// a call under -race; the counter is not one of the exact algorithms that
// must run 10,000 steps on both backends, and runs them all on real Redis.
const modelCounterMiniScale = 0.3

// modelCase is one rule and the length and seed of its random timeline.
type modelCase struct {
	alg    AlgorithmKind
	window time.Duration
	limit  int
	burst  int // TokenBucket: the bucket's capacity
	subs   int // SlidingCounter: the number of sub-windows
	steps  int
	seed   uint64
}

func (c modelCase) String() string {
	s := fmt.Sprintf("w=%v,l=%d", c.window, c.limit)
	switch c.alg {
	case TokenBucket:
		s += fmt.Sprintf(",b=%d", c.burst)
	case SlidingCounter:
		s += fmt.Sprintf(",n=%d", c.subs)
	}
	return s
}

func (c modelCase) windowUS() int64 { return c.window.Microseconds() }

// maxCost is the largest cost the rule admits.
func (c modelCase) maxCost() int {
	if c.alg == TokenBucket {
		return c.burst
	}
	return c.limit
}

// boundary is the spacing of the clock-aligned boundaries where the count
// changes at once: the sub-window for the counter, else the window.
func (c modelCase) boundary() int64 {
	if c.alg == SlidingCounter {
		return c.windowUS() / int64(c.subs)
	}
	return c.windowUS()
}

func (c modelCase) model() rateModel {
	w := c.windowUS()
	switch c.alg {
	case SlidingCounter:
		return newSlidingCounterModel(w, c.limit, c.subs)
	case FixedWindow:
		return newFixedWindowModel(w, c.limit)
	case TokenBucket:
		return newTokenBucketModel(w, c.limit, c.burst)
	}
	return newSlidingLogModel(w, c.limit)
}

func (c modelCase) options() []Option {
	opts := []Option{Window(c.window), Limit(c.limit), Algorithm(c.alg), DenyCache(0)}
	switch c.alg {
	case TokenBucket:
		opts = append(opts, Burst(c.burst))
	case SlidingCounter:
		opts = append(opts, subWindows(c.subs))
	}
	return opts
}

// The cases: windows of 1 ms, 7.3 ms, 250 ms and 1 s (and multiples of 3 and
// 60 for the counter), limits from 1 to 200, and for the sliding log its
// largest limit (lua.MaxLogLimit) and its longest window (lua.MaxLogWindow,
// over which its entries' base moves on); token buckets with bursts below
// and above the limit and refill times that are not whole microseconds. Each
// exact algorithm runs at least 10,000 steps per backend.
const milli = time.Millisecond

var (
	modelSlidingLogCases = []modelCase{
		{window: 1 * milli, limit: 1, steps: 800, seed: 101},
		{window: 1 * milli, limit: 5, steps: 800, seed: 102},
		{window: 250 * milli, limit: 3, steps: 800, seed: 103},
		{window: 7300 * time.Microsecond, limit: 37, steps: 1000, seed: 104},
		{window: time.Second, limit: 66, steps: 1400, seed: 105},
		{window: 250 * milli, limit: 70, steps: 1400, seed: 106},
		{window: 7300 * time.Microsecond, limit: 100, steps: 1400, seed: 107},
		{window: time.Second, limit: 130, steps: 1400, seed: 108},
		{window: 1 * milli, limit: 200, steps: 1200, seed: 109},
		// Costs up to the largest limit; the longest window.
		{window: 250 * milli, limit: lua.MaxLogLimit, steps: 1000, seed: 110},
		{window: lua.MaxLogWindow * time.Microsecond, limit: 1000, steps: 1000, seed: 111},
	}
	modelFixedWindowCases = []modelCase{
		{window: 1 * milli, limit: 1, steps: 1000, seed: 201},
		{window: 1 * milli, limit: 7, steps: 1200, seed: 202},
		{window: 250 * milli, limit: 3, steps: 1200, seed: 203},
		{window: 7300 * time.Microsecond, limit: 50, steps: 1400, seed: 204},
		{window: time.Second, limit: 20, steps: 1200, seed: 205},
		{window: time.Second, limit: 100, steps: 1400, seed: 206},
		{window: 250 * milli, limit: 200, steps: 1400, seed: 207},
		{window: 7300 * time.Microsecond, limit: 128, steps: 1400, seed: 208},
	}
	modelTokenBucketCases = []modelCase{
		{window: 1 * milli, limit: 1, burst: 1, steps: 1000, seed: 301},
		{window: 1 * milli, limit: 3, burst: 10, steps: 1200, seed: 302},   // T = 333.33 µs
		{window: 250 * milli, limit: 10, burst: 3, steps: 1200, seed: 303}, // T = 25 ms
		{window: time.Second, limit: 7, burst: 7, steps: 1200, seed: 304},  // T = 142857.14 µs
		{window: 7300 * time.Microsecond, limit: 100, burst: 1, steps: 1200, seed: 305},
		{window: time.Second, limit: 200, burst: 50, steps: 1400, seed: 306},
		{window: 250 * milli, limit: 3, burst: 200, steps: 1400, seed: 307},
		{window: 7300 * time.Microsecond, limit: 64, burst: 130, steps: 1400, seed: 308}, // T = 114.0625 µs
	}
	modelSlidingCounterCases = []modelCase{
		{window: 1 * milli, limit: 5, subs: 1, steps: 1000, seed: 401},
		{window: 1 * milli, limit: 10, subs: 2, steps: 1200, seed: 402},
		{window: 3 * milli, limit: 4, subs: 3, steps: 1000, seed: 403},
		{window: 7300 * time.Microsecond, limit: 20, subs: 10, steps: 1200, seed: 404},
		{window: 250 * milli, limit: 100, subs: 10, steps: 1400, seed: 405},
		{window: 300 * milli, limit: 7, subs: 3, steps: 1000, seed: 406},
		{window: 600 * milli, limit: 120, subs: 60, steps: 1400, seed: 407},
		{window: time.Second, limit: 1, subs: 2, steps: 800, seed: 408},
		{window: time.Second, limit: 200, subs: 10, steps: 1400, seed: 409},
	}
)

func TestModelRandomSlidingLog(t *testing.T) { runModelCases(t, SlidingLog, modelSlidingLogCases) }

func TestModelRandomFixedWindow(t *testing.T) { runModelCases(t, FixedWindow, modelFixedWindowCases) }

func TestModelRandomTokenBucket(t *testing.T) { runModelCases(t, TokenBucket, modelTokenBucketCases) }

func TestModelRandomSlidingCounter(t *testing.T) {
	runModelCases(t, SlidingCounter, modelSlidingCounterCases)
}

// modelEpoch is where the random timelines' test clock starts: 2040-01-01
// UTC, in the same power-of-two range of µs (2^50 to 2^51) as today's clock,
// so the token bucket's doubles round as in production, and far enough ahead
// that the absolute expiries (PEXPIREAT) of the fixed window and the counter
// lie in a real redis-server's future. Once the real clock nears it, it moves
// on to a later New Year.
func modelEpoch() int64 {
	e := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	if soon := time.Now().AddDate(1, 0, 0); soon.After(e) {
		e = time.Date(soon.Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return e.UnixMicro()
}

// modelBackend is where a case's script runs.
type modelBackend struct {
	client redis.Scripter
	// setClock, when set, moves the backend's own clock (TIME and TTLs) to
	// the step's time before the decision.
	setClock func(now int64)
}

func runModelCases(t *testing.T, alg AlgorithmKind, cases []modelCase) {
	testtier.Long(t)
	t.Parallel()
	miniCase := func(c modelCase) modelCase {
		c.alg = alg
		if alg == SlidingCounter {
			c.steps = int(float64(c.steps) * modelCounterMiniScale)
		}
		return c
	}
	total, mini := 0, 0
	for _, c := range cases {
		total += modelSteps(c)
		mini += modelSteps(miniCase(c))
	}
	t.Logf("%v: %d steps on real Redis and %d on miniredis, over %d cases", alg, total, mini, len(cases))
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		for _, c := range cases {
			c := miniCase(c)
			t.Run(c.String(), func(t *testing.T) {
				// A miniredis per case: its clock is the case's. TTLs move
				// with it (FastForward), so a key that expired while its
				// state still mattered would show as a mismatch.
				m := miniredis.RunT(t)
				client := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = client.Close() })
				var last int64
				runModelCase(t, c, modelBackend{client: client, setClock: func(now int64) {
					if last != 0 {
						m.FastForward(time.Duration(now-last) * time.Microsecond)
					}
					m.SetTime(time.UnixMicro(now))
					last = now
				}})
			})
		}
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		client := persistingScripter{srv.Client()}
		for _, c := range cases {
			c.alg = alg
			// Between the script's PEXPIRE and the PERSIST after it, a
			// loaded machine can spend a whole millisecond, and a 1 ms TTL
			// then runs out in real time. So the real server runs the
			// shortest windows at 6 ms (a multiple of every sub-window
			// count used); miniredis covers them as written.
			if c.window < 5*time.Millisecond {
				c.window = 6 * time.Millisecond
			}
			t.Run(c.String(), func(t *testing.T) {
				runModelCase(t, c, modelBackend{client: client})
			})
		}
	})
}

// persistingScripter runs each script call in MULTI/EXEC with a PERSIST of
// its key, in the same round trip. A real redis-server runs TTLs on its own
// clock, which the test clock does not move: a 1 ms TTL would expire after
// 1 ms of real time while the test clock may say its state is still live.
// Without TTLs every script still tells stale state from live by the time,
// so the decisions are unchanged. The miniredis runs, where TTLs move with
// the test clock, check the TTLs, and TestRealRedisClockAndTTL checks them
// on a real clock.
type persistingScripter struct{ *redis.Client }

// Process runs a command the way the engine sends its EVALSHA (it builds
// the command itself and gives it to a client that runs commands): a
// script call goes in MULTI/EXEC with a PERSIST of its first key, as
// EvalSha's does; anything else as it is.
func (p persistingScripter) Process(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	if name := strings.ToLower(fmt.Sprint(args[0])); name != "evalsha" && name != "eval" || len(args) < 4 {
		return p.Client.Process(ctx, cmd)
	}
	_, _ = p.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		_ = pipe.Process(ctx, cmd)
		pipe.Persist(ctx, fmt.Sprint(args[3]))
		return nil
	})
	return cmd.Err()
}

func (p persistingScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	_, _ = p.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		cmd = pipe.EvalSha(ctx, sha1, keys, args...)
		pipe.Persist(ctx, keys[0])
		return nil
	})
	return cmd
}

func (p persistingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	_, _ = p.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		cmd = pipe.Eval(ctx, script, keys, args...)
		pipe.Persist(ctx, keys[0])
		return nil
	})
	return cmd
}

func modelSteps(c modelCase) int {
	return max(1, int(math.Round(float64(c.steps)**modelScaleFlag)))
}

// modelLogged is one step of a timeline, for the failure message.
type modelLogged struct {
	i    int
	at   int64 // µs after the start
	cost int
	got  modelResult
}

// runModelCase runs one random timeline through the script on b and through
// the model, and fails at the first decision where they differ.
func runModelCase(t *testing.T, c modelCase, b modelBackend) {
	seed := c.seed
	if *modelSeedFlag != 0 {
		seed = *modelSeedFlag
	}
	steps := modelSteps(c)
	p := mustPolicy(t, append(c.options(), Redis(b.client), Key(prefix(t)))...)
	var now int64
	p.route.Clock = func() int64 { return now }
	g := newModelTimeline(c, seed, modelEpoch())
	m := c.model()
	ctx := context.Background()

	var recent [8]modelLogged
	var allowed, rejected int
	for i := range steps {
		var cost int
		now, cost = g.next()
		if b.setClock != nil {
			b.setClock(now)
		}
		d, err := p.Allow(ctx, "k", cost)
		if err != nil {
			t.Fatalf("seed %d, step %d (start+%dµs, cost %d): %v", seed, i, now-g.start, cost, err)
		}
		got := modelResult{d.Allowed, d.Remaining, int64(d.Reset / time.Microsecond), int64(d.RetryAfter / time.Microsecond)}
		want := decideModel(m, now, cost)
		recent[i%len(recent)] = modelLogged{i, now - g.start, cost, got}
		why := modelCompare(got, want)
		if why == "" && d.Time.UnixMicro() != now {
			why = fmt.Sprintf("decision time %d, want the test clock %d", d.Time.UnixMicro(), now)
		}
		if why != "" {
			var h strings.Builder
			for j := max(0, i-len(recent)+1); j < i; j++ {
				r := recent[j%len(recent)]
				fmt.Fprintf(&h, "\n\tstep %5d  start+%dµs  cost %-3d  script %v", r.i, r.at, r.cost, r.got)
			}
			t.Fatalf("%v %v, seed %d: step %d of %d at start+%dµs (now %dµs), cost %d: %s\n\tscript: %v\n\tmodel:  %v\nthe steps before:%s\nreproduce: go test -count=1 -run '%s' -model.seed=%d ./ginlimit",
				c.alg, c, seed, i, steps, now-g.start, now, cost, why, got, want, h.String(), modelRunPattern(t), seed)
		}
		g.observe(want)
		if want.allowed {
			allowed++
		} else {
			rejected++
		}
	}
	t.Logf("seed %d: %d steps over %v: %d allowed, %d rejected",
		seed, steps, time.Duration(now-g.start)*time.Microsecond, allowed, rejected)
}

// modelRunPattern is a -run pattern that selects t alone.
func modelRunPattern(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// modelBurstMax caps the requests of a burst (limit+4 at most) for the
// cases with very large limits.
const modelBurstMax = 200

// modelTimeline makes a random request timeline for a case: gaps of zero,
// a few µs, around the mean gap at the limit's rate, up to the boundaries
// and reset and retry moments the last decision named (one µs either side
// included), half a window to a few windows; bursts of requests in one µs
// or a few µs apart; costs mostly 1, sometimes random up to the largest and
// sometimes exactly the largest.
type modelTimeline struct {
	rng      *rand.Rand
	c        modelCase
	start    int64
	now      int64
	first    bool
	burst    int   // requests left in the current burst
	burstGap int64 // the gap between them
	last     modelResult
	lastAt   int64
}

func newModelTimeline(c modelCase, seed uint64, epoch int64) *modelTimeline {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// Start anywhere within two windows of the epoch, so that boundaries,
	// and the sliding log's milliseconds and quarter-window expiries, fall
	// differently per seed.
	start := epoch + rng.Int64N(2*c.windowUS())
	return &modelTimeline{rng: rng, c: c, start: start, now: start, first: true}
}

// observe passes the model's decision at the current step, whose reset and
// retry the next gap may aim at.
func (g *modelTimeline) observe(r modelResult) { g.last, g.lastAt = r, g.now }

func (g *modelTimeline) next() (now int64, cost int) {
	if g.first {
		g.first = false
		return g.now, g.cost()
	}
	g.now += g.gap()
	return g.now, g.cost()
}

func (g *modelTimeline) cost() int {
	top := g.c.maxCost()
	switch r := g.rng.IntN(100); {
	case r < 75:
		return 1
	case r < 94:
		return 1 + g.rng.IntN(top)
	}
	return top
}

// near is target moved by -1, 0 or +1 µs, as a gap from now (0 if passed).
func (g *modelTimeline) near(target int64) int64 {
	return max(0, target+g.rng.Int64N(3)-1-g.now)
}

func (g *modelTimeline) gap() int64 {
	w := g.c.windowUS()
	if g.burst > 0 {
		g.burst--
		return g.burstGap
	}
	mean := max(1, w/int64(g.c.limit))
	switch r := g.rng.IntN(100); {
	case r < 4: // a burst, starting at a boundary
		g.burst = 1 + g.rng.IntN(min(g.c.limit, modelBurstMax)+4)
		g.burstGap = []int64{0, 0, 1, 2, 5}[g.rng.IntN(5)]
		b := g.c.boundary()
		return g.near((g.now/b + 1) * b)
	case r < 18:
		return 0
	case r < 28:
		return 1 + g.rng.Int64N(10)
	case r < 55:
		return 1 + g.rng.Int64N(2*mean)
	case r < 65: // the next clock-aligned boundary
		b := g.c.boundary()
		return g.near((g.now/b + 1) * b)
	case r < 80: // when the last decision said more quota comes, or a retry fits
		target := g.lastAt + g.last.reset
		if !g.last.allowed && g.rng.IntN(2) == 0 {
			target = g.lastAt + g.last.retry
		}
		return g.near(target)
	case r < 96:
		return w/2 + g.rng.Int64N(w)
	}
	return w + g.rng.Int64N(4*w)
}

// modelAllCases is every case of the four algorithms.
func modelAllCases() []modelCase {
	var all []modelCase
	for _, g := range []struct {
		alg   AlgorithmKind
		cases []modelCase
	}{
		{SlidingLog, modelSlidingLogCases},
		{SlidingCounter, modelSlidingCounterCases},
		{FixedWindow, modelFixedWindowCases},
		{TokenBucket, modelTokenBucketCases},
	} {
		for _, c := range g.cases {
			c.alg = g.alg
			all = append(all, c)
		}
	}
	return all
}

// TestModelRetryFits checks, on the models (which the random tests show
// decide bit for bit as the scripts do), what retry_us promises: a rejected
// request sent again retry_us later, with nothing else in between, fits, and
// one µs earlier it does not. The timelines are the random tests' own, ten
// times longer, without Redis.
func TestModelRetryFits(t *testing.T) {
	t.Parallel()
	for _, c := range modelAllCases() {
		t.Run(string(c.alg)+"/"+c.String(), func(t *testing.T) {
			t.Parallel()
			seed := c.seed
			if *modelSeedFlag != 0 {
				seed = *modelSeedFlag
			}
			g := newModelTimeline(c, seed, modelEpoch())
			m := c.model()
			var bad []string
			violations, rejections := 0, 0
			for i := range 10 * modelSteps(c) {
				now, cost := g.next()
				before := m.clone()
				r := decideModel(m, now, cost)
				g.observe(r)
				if r.allowed {
					continue
				}
				rejections++
				var why string
				switch {
				case r.retry < 1:
					why = fmt.Sprintf("retry %dµs on a rejection", r.retry)
				case !decideModel(before.clone(), now+r.retry, cost).allowed:
					fits := "not within retry+1000µs"
					for late := int64(1); late <= 1000; late++ {
						if decideModel(before.clone(), now+r.retry+late, cost).allowed {
							fits = fmt.Sprintf("only %dµs later", late)
							break
						}
					}
					why = fmt.Sprintf("retry %dµs, but at now+retry the same request is still rejected; it fits %s", r.retry, fits)
				case decideModel(before.clone(), now+r.retry-1, cost).allowed:
					why = fmt.Sprintf("retry %dµs, but the request already fits 1µs earlier", r.retry)
				}
				if why == "" {
					continue
				}
				violations++
				if len(bad) < 4 {
					bad = append(bad, fmt.Sprintf("step %d at start+%dµs (now %d), cost %d: %v: %s", i, now-g.start, now, cost, r, why))
				}
			}
			if violations > 0 {
				t.Errorf("%v %v, seed %d: %d of %d rejections break retry_us's promise; the first:\n\t%s",
					c.alg, c, seed, violations, rejections, strings.Join(bad, "\n\t"))
			}
		})
	}
}

// TestModelTokenBucketBurstAfterQuietSpell checks [Burst]'s documented
// promise on the script itself, on both backends: after a quiet spell,
// burst units pass at once, as burst requests of cost 1 at one instant or
// as one request of cost burst, and each reports the whole tokens left.
func TestModelTokenBucketBurstAfterQuietSpell(t *testing.T) {
	t.Parallel()
	cases := []modelCase{
		{window: time.Second, limit: 10, burst: 10}, // T = 100 ms exactly: holds
		{window: time.Second, limit: 7, burst: 1},
		{window: time.Second, limit: 6, burst: 6},
		{window: time.Second, limit: 29, burst: 29},
		{window: time.Minute, limit: 9, burst: 1},
	}
	run := func(t *testing.T, client redis.Scripter) {
		for _, c := range cases {
			c.alg = TokenBucket
			p := mustPolicy(t, append(c.options(), Redis(client), Key(prefix(t)))...)
			var now int64
			p.route.Clock = func() int64 { return now }
			ctx := context.Background()
			m := c.model()
			now = modelEpoch() + 1 // quiet: the key is new
			admitted := 0
			var first Decision
			var remaining []int // as reported, after each admission
			for i := range c.burst {
				d, err := p.Allow(ctx, "ones", 1)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := d.Allowed, decideModel(m, now, 1).allowed; got != want {
					t.Fatalf("%v: the script and the model disagree", c)
				}
				if d.Allowed {
					admitted++
					remaining = append(remaining, d.Remaining)
				} else if admitted == i {
					first = d
				}
			}
			if admitted != c.burst {
				t.Errorf("Window(%v) Limit(%d) Burst(%d): after a quiet spell %d of %d requests of cost 1 at one instant passed, want all; the first rejected: Remaining %d, Reset %v, RetryAfter %v",
					c.window, c.limit, c.burst, admitted, c.burst, first.Remaining, first.Reset, first.RetryAfter)
			}
			for i, r := range remaining {
				// "remaining is the whole tokens left": burst-(i+1) exactly.
				if r != c.burst-(i+1) {
					t.Errorf("Window(%v) Limit(%d) Burst(%d): after a quiet spell the requests of cost 1 at one instant reported Remaining %v, want %d down to 0",
						c.window, c.limit, c.burst, remaining, c.burst-1)
					break
				}
			}
			d, err := p.Allow(ctx, "whole", c.burst)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				t.Errorf("Window(%v) Limit(%d) Burst(%d): after a quiet spell a request of cost %d was rejected (Remaining %d, Reset %v, RetryAfter %v), want allowed",
					c.window, c.limit, c.burst, c.burst, d.Remaining, d.Reset, d.RetryAfter)
			}
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		m.SetTime(time.UnixMicro(modelEpoch()))
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		run(t, client)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		run(t, persistingScripter{redistest.Start(t).Client()})
	})
}

// TestModelSlidingCounterWorstCase runs on the script the request pattern
// that lets the most units through a sliding counter in one window's
// length, the documented worst case of 2*limit: limit units in the last µs
// of a sub-window, then limit more once that sub-window has left the count,
// n-1 sub-windows later, (n-1)/n of the window plus 1 µs apart.
func TestModelSlidingCounterWorstCase(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	const limit = 10
	for _, n := range []int{2, 10, 60} {
		c := modelCase{alg: SlidingCounter, window: 600 * milli, limit: limit, subs: n}
		p := mustPolicy(t, append(c.options(), Redis(client), Key(prefix(t)))...)
		var now int64
		p.route.Clock = func() int64 { return now }
		sub := c.windowUS() / int64(n)
		j := modelEpoch() / sub
		firstAt, secondAt := (j+1)*sub-1, (j+int64(n))*sub
		log := idealLogModel(c.windowUS(), math.MaxInt)
		for _, at := range []int64{firstAt, secondAt} {
			now = at
			m.SetTime(time.UnixMicro(now))
			d, err := p.Allow(ctx, "k", limit)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				t.Fatalf("n=%d: %d units at start+%dµs rejected (%+v), but none are counted then", n, limit, at-firstAt, d)
			}
			log.record(now, limit)
		}
		inWindow := log.inWindow(secondAt)
		if inWindow != 2*limit {
			t.Fatalf("n=%d: %d units in the window ending at the second batch, want %d", n, inWindow, 2*limit)
		}
		t.Logf("n=%d: %d units passed within %dµs (window %dµs): %.2f times the limit",
			n, inWindow, secondAt-firstAt, c.windowUS(), float64(inWindow)/limit)
	}
}

// TestModelSlidingCounterError measures how far the sliding counter is from
// the exact sliding log, on the models (the random tests show the script
// decides as its model does), for n = 2, 10 and 60 sub-windows, all on one
// timeline of cost-1 requests: a steady Poisson load at 0.9 or 1.1 times the
// limit's rate, plus about once a window a burst of a fifth of the limit at
// a multiple of 300 ms (a sub-window boundary for every n), give or take a
// µs. Two measures, as shares of all requests:
//
//   - against history: each decision of the counter is judged by the exact
//     rule applied to what the counter itself admitted. A wrong admission
//     puts more than the limit in the window ending now. A wrong rejection
//     cannot happen: the counted sub-windows lie inside the window.
//   - against an exact limiter: the sliding log (its model, which records
//     admissions to the millisecond as the script does) runs beside the
//     counter on the same timeline, with its own admissions, and the
//     decisions are compared one by one.
//
// It also reports the most units the counter let into one window's length
// (documented: up to 2*limit) and checks the documented bound that any span
// of (n-1)/n of the window holds at most limit units. Otherwise it is a
// measurement: it logs the figures and checks loose bounds only.
//
//	GINLIMIT_LONG=1 go test -count=1 -run 'TestModelSlidingCounterError' -v ./ginlimit
func TestModelSlidingCounterError(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	const (
		window  = 600_000 // µs; 2, 10 and 60 divide it
		limit   = 100
		windows = 400
	)
	for _, load := range []float64{0.9, 1.1} {
		seed := uint64(500 + 10*load)
		if *modelSeedFlag != 0 {
			seed = *modelSeedFlag
		}
		times := modelPoissonTimeline(seed, modelEpoch(), window, limit, windows, load)
		for _, n := range []int{2, 10, 60} {
			counter := newSlidingCounterModel(window, limit, n)
			admitted := idealLogModel(window, math.MaxInt) // what the counter admitted
			span := idealLogModel(window-window/int64(n), math.MaxInt)
			exact := newSlidingLogModel(window, limit) // the sliding log's script
			var allowed, wrongAllow, wrongReject, counterOnly, exactOnly, peak, spanPeak int
			for _, now := range times {
				truth := admitted.inWindow(now)+1 <= limit
				ok, _, _, _ := counter.decide(now, 1)
				e, _, _, _ := exact.decide(now, 1)
				switch {
				case ok && !truth:
					wrongAllow++
				case !ok && truth:
					wrongReject++
				}
				switch {
				case ok && !e:
					counterOnly++
				case !ok && e:
					exactOnly++
				}
				if ok {
					allowed++
					admitted.record(now, 1)
					peak = max(peak, admitted.inWindow(now))
					span.record(now, 1)
					spanPeak = max(spanPeak, span.inWindow(now))
				}
			}
			pct := func(k int) float64 { return 100 * float64(k) / float64(len(times)) }
			t.Logf("load %.1f, n=%-2d (seed %d, %d requests, %d admitted): against history: wrongly allowed %5.2f%%, wrongly rejected %.2f%%; "+
				"against an exact limiter: allowed by the counter only %5.2f%%, by the log only %5.2f%%; peak %d in one window (%.2f times the limit), %d in (n-1)/n of it",
				load, n, seed, len(times), allowed, pct(wrongAllow), pct(wrongReject), pct(counterOnly), pct(exactOnly),
				peak, float64(peak)/limit, spanPeak)
			if wrongReject != 0 {
				t.Errorf("load %.1f, n=%d: %d requests rejected that the exact rule admits given the same history; the counted span lies inside the window, so there must be none", load, n, wrongReject)
			}
			if pct(wrongAllow) >= 25 || pct(counterOnly) >= 25 || pct(exactOnly) >= 25 {
				t.Errorf("load %.1f, n=%d: an error share of 25%% or more", load, n)
			}
			if peak > 2*limit {
				t.Errorf("load %.1f, n=%d: %d units in one window, more than twice the limit", load, n, peak)
			}
			if spanPeak > limit {
				t.Errorf("load %.1f, n=%d: %d units in (n-1)/n of the window, more than the limit", load, n, spanPeak)
			}
		}
	}
	t.Logf("reproduce: GINLIMIT_LONG=1 go test -count=1 -run 'TestModelSlidingCounterError' -v ./ginlimit")
}

// modelPoissonTimeline returns the request times of windows windows from
// start: Poisson arrivals at load times limit per window, and about once a
// window a burst of limit/5 requests at a multiple of 300 ms, give or take
// a µs.
func modelPoissonTimeline(seed uint64, start, window int64, limit, windows int, load float64) []int64 {
	const boundary = 300_000
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	start += rng.Int64N(window)
	end := start + int64(windows)*window
	mean := float64(window) / (load * float64(limit))
	nextBurst := start + rng.Int64N(window)
	var times []int64
	for now := start; now < end; {
		next := now + int64(rng.ExpFloat64()*mean)
		if next >= nextBurst {
			at := max(now, (nextBurst/boundary+1)*boundary+rng.Int64N(3)-1)
			for range limit / 5 {
				times = append(times, at)
			}
			now = at
			nextBurst = at + window/2 + rng.Int64N(window)
			continue
		}
		now = next
		times = append(times, now)
	}
	return times
}
