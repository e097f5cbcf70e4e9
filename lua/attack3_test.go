package lua

// Attack tests (review 3): the sliding log's decisions on the newest entry
// alone, the literal settings of the single-rule scripts, and the fixed
// window's and token bucket's new formats, against plain reference models.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// refLog is a plain sliding log: every admitted request with its time and
// cost; the clock never steps back in the tests that use it.
type refLog struct {
	at, cost []int64
}

// decide returns what an exact sliding log answers at now for a request of
// cost under window and limit: admitted, remaining, reset, retry; and
// records it when admitted and record is true.
func (m *refLog) decide(now, window, limit, cost int64, record bool) (bool, int64, int64, int64) {
	var units int64
	oldest := -1
	for i := range m.at {
		if m.at[i] > now-window {
			units += m.cost[i]
			if oldest < 0 {
				oldest = i
			}
		}
	}
	if units+cost <= limit {
		reset := window
		if oldest >= 0 {
			reset = m.at[oldest] + window - now
		}
		if record {
			m.at, m.cost = append(m.at, now), append(m.cost, cost)
		}
		return true, limit - units - cost, reset, 0
	}
	k := units + cost - limit
	var freed int64
	retry := int64(-1)
	for i := oldest; i < len(m.at); i++ {
		freed += m.cost[i]
		if freed >= k {
			retry = m.at[i] + window - now
			break
		}
	}
	return false, max(0, limit-units), m.at[oldest] + window - now, retry
}

// TestAttackSlidingLogRandomExact runs random timelines on one sliding-log
// key (the clock never goes back; many requests share a microsecond; costs
// mix 1 and more; the limit and exact-below change between calls, as a
// redeploy would change them, with the key holding more than a lowered
// limit), and compares every reply with the plain model: fired always;
// remaining and reset when rejected or when fewer than exact-below units
// remain (else remaining at most the model's, reset at least); retry
// always. Each step also runs a Peek first, and sometimes the request goes
// with a second rule that rejects (nothing may be recorded then). Each step
// PERSISTs the key so that the real server never expires what the test
// clock still counts.
func TestAttackSlidingLogRandomExact(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		peek := redis.NewScript(Peek(Algorithms()...))
		several := redis.NewScript(Several(Algorithms()...))
		fw := number(t, "fixed_window")
		for _, s := range []*redis.Script{peek, several} {
			if err := s.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 33))
			const window = 1e6
			base := int64(10 + rng.IntN(30))
			limits := []int64{base, base / 2, base * 2, base + 1, 3}
			params := []int64{0, 3, 64, base}
			key := prefix(t) + "log"
			wall := prefix(t) + "wall" // the rejecting rule's key
			var m refLog
			clock := startClock()
			limit, param := base, int64(64)
			var admitted, rejected, fast int
			// A window of 1e15 µs (about 31 years): the test clock, which
			// starts at the wall clock and runs on up to ~20 min, never
			// crosses a window boundary, as it could with an hour.
			wallRule := rule{alg: fw, window: 1e15, limit: 1, cost: 1}
			if err := several.Run(ctx, c, []string{wall}, args(clock, wallRule)...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Persist(ctx, wall).Err(); err != nil {
				t.Fatal(err)
			}
			if seed >= 6 {
				// The key starts with one entry as if nearly 2^52 units
				// had passed on it: its running count wraps on the way.
				cum := int64(1)<<52 - []int64{1, 2, 5, 40}[seed-6]
				e := logEntry{at: clock, cum: cum, units: 1, cost: 1}
				if seed%2 == 0 {
					e.first = clock
				}
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(clock), Member: encodeMember(e)}).Err(); err != nil {
					t.Fatal(err)
				}
				m.at, m.cost = []int64{clock}, []int64{1}
			}
			for step := range 700 {
				switch r := rng.IntN(20); {
				case r < 6: // the same microsecond
				case r < 14:
					clock += rng.Int64N(2*window/base + 1)
				case r < 17:
					clock += rng.Int64N(window / 4)
				case r < 19 && len(m.at) > 0:
					// To the moment an entry leaves, or a µs either side.
					e := m.at[rng.IntN(len(m.at))] + window - 1 + rng.Int64N(3)
					clock = max(clock, e)
				default:
					clock += rng.Int64N(window * 3 / 2)
				}
				if rng.IntN(40) == 0 {
					limit = limits[rng.IntN(len(limits))]
				}
				if rng.IntN(60) == 0 {
					param = params[rng.IntN(len(params))]
				}
				cost := int64(1)
				if rng.IntN(5) == 0 {
					cost = 1 + rng.Int64N(min(limit, 5))
				}
				r := rule{alg: 0, window: window, limit: limit, param: param, cost: cost}
				blocked := rng.IntN(8) == 0
				single := loadedSingle(ctx, t, c, r)
				var look, cmd *redis.Cmd
				_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					look = peek.EvalSha(ctx, pipe, []string{key}, args(clock, r)...)
					if blocked {
						// The wall rule is full: it rejects.
						cmd = several.EvalSha(ctx, pipe, []string{key, wall}, args(clock, r, wallRule)...)
					} else {
						cmd = single.EvalSha(ctx, pipe, []string{key}, singleArgs(clock, cost)...)
					}
					pipe.Persist(ctx, key)
					return nil
				})
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				l := ints(t, look.Val())
				got := ints(t, cmd.Val())
				what := fmt.Sprintf("seed %d step %d (clock +%d, limit %d, param %d, cost %d, blocked %v)", seed, step, clock-startClockBase(clock), limit, param, cost, blocked)
				// The Peek: what the rule alone would say, recording nothing.
				pok, prem, preset, pretry := m.decide(clock, window, limit, cost, false)
				checkLogReply(t, what+" Peek", l[2:6], pok, prem, preset, pretry, param, cost, true)
				ok, rem, reset, retry := m.decide(clock, window, limit, cost, !blocked)
				rule1 := got[2:6]
				if blocked {
					if want := 2 - b2i(!ok); got[1] != want {
						t.Fatalf("%s: fired %d, want %d", what, got[1], want)
					}
					checkLogReply(t, what, rule1, ok, rem, reset, retry, param, cost, true)
					continue
				}
				if (got[1] == 0) != ok {
					t.Fatalf("%s: reply %v, model admits %v (remaining %d, reset %d, retry %d)\nentries %v", what, got[1:], ok, rem, reset, retry, describeLog(ctx, t, c, key))
				}
				if ok {
					admitted++
				} else {
					rejected++
				}
				checkLogReply(t, what, rule1, ok, rem, reset, retry, param, cost, false)
				if e := logEntries(ctx, t, c, key); len(e) > 0 && e[len(e)-1].first != 0 {
					fast++
				}
			}
			t.Logf("seed %d: %d admitted, %d rejected, %d steps with an exact newest entry", seed, admitted, rejected, fast)
			if admitted < 50 || rejected < 50 || fast < 50 {
				t.Errorf("seed %d: %d admitted, %d rejected, %d exact newest: the timeline does not exercise them", seed, admitted, rejected, fast)
			}
		}
	})
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// startClockBase is the clock's second, to print offsets.
func startClockBase(clock int64) int64 { return clock - clock%1e9 }

// checkLogReply checks one rule's {ok, remaining, reset, retry} against the
// model's answer. Without a record (a Peek, or another rule rejected), an
// admissible request's report is the key's exact state without it: the
// model's remaining plus its cost.
func checkLogReply(t *testing.T, what string, got []int64, ok bool, rem, reset, retry, param, cost int64, unrecorded bool) {
	t.Helper()
	if (got[0] == 1) != ok {
		t.Fatalf("%s: ok %d, model %v (remaining %d reset %d retry %d)", what, got[0], ok, rem, reset, retry)
	}
	if !ok {
		if got[1] != rem || got[2] != reset || got[3] != retry {
			t.Fatalf("%s: rejected with remaining %d reset %d retry %d; model %d %d %d", what, got[1], got[2], got[3], rem, reset, retry)
		}
		return
	}
	if unrecorded {
		if got[1] != rem+cost || got[2] != reset || got[3] != 0 {
			t.Fatalf("%s: admissible, unrecorded: remaining %d reset %d retry %d; model %d %d 0", what, got[1], got[2], got[3], rem+cost, reset)
		}
		return
	}
	if got[3] != 0 {
		t.Fatalf("%s: admitted with retry %d", what, got[3])
	}
	if rem < param {
		if got[1] != rem || got[2] != reset {
			t.Fatalf("%s: admitted with remaining %d reset %d; model %d %d (exact below %d)", what, got[1], got[2], rem, reset, param)
		}
		return
	}
	if got[1] > rem || got[2] < reset {
		t.Fatalf("%s: admitted with remaining %d reset %d; model %d %d: not bounds", what, got[1], got[2], rem, reset)
	}
}

// describeLog prints a sliding-log key's entries.
func describeLog(ctx context.Context, t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	var s string
	for _, e := range logEntries(ctx, t, c, key) {
		s += fmt.Sprintf("\n  at %d cum %d units %d cost %d first %d", e.at, e.cum, e.units, e.cost, e.first)
	}
	return s
}

// loadedSingle returns r's single-rule script, loaded on c.
func loadedSingle(ctx context.Context, t *testing.T, c *redis.Client, r rule) *redis.Script {
	t.Helper()
	s := singleFor(r)
	if err := s.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

var _ = slices.Equal[[]int64]

// TestAttackTokenBucketCapacityAt2Pow53: the bucket's settings allow
// burst*window = 2^53 exactly (lua.go, token_bucket_validate, and ginlimit's
// start-up check: Window 2^24 µs, Limit 1, Burst 2^29 is accepted). Then
// ahead + cost*window can be 2^53 + 1, which a double rounds to 2^53, the
// capacity: a request that needs one more 1/limit µs to conform is
// admitted. Here the bucket is emptied at once (cost = burst), and 2^24 - 1
// µs later, one µs before a token is back, a request of cost 1 is admitted;
// GCRA says: rejected, retry 1 µs.
func TestAttackTokenBucketCapacityAt2Pow53(t *testing.T) {
	t.Parallel()
	// On the real server only: miniredis keeps a TTL in ns, and this
	// bucket's (1.1e13 ms) overflows it, so the key is gone at once there
	// (see the report).
	func(c *redis.Client) {
		ctx := context.Background()
		const window, limit, burst = 1 << 24, 1, 1 << 29
		s := singleFor(rule{alg: number(t, "token_bucket"), window: window, limit: limit, param: burst})
		key := prefix(t) + "tb"
		clock := startClock()
		got := ints(t, s.Run(ctx, c, []string{key}, singleArgs(clock, burst)...).Val())
		if got[1] != 0 || got[3] != 0 {
			t.Fatalf("emptying the bucket: %v, want admitted with 0 remaining", got)
		}
		got = ints(t, s.Run(ctx, c, []string{key}, singleArgs(clock+window-1, 1)...).Val())
		if want := []int64{1, 0, 0, 1, 1}; !slices.Equal(got[1:], want) {
			t.Fatalf("1 µs before the first token is back: reply %v, want rejected, 0 remaining, reset 1, retry 1 %v", got[1:], want)
		}
	}(redistest.Start(t).Client())
}

// TestAttackTokenBucketOlderTextOf21Bytes: the older format's text
// "<base>:<ahead>" is 21 bytes whenever base has 16 digits (every µs time
// since 2001) and ahead 4: a window of 1 to 10 ms gives ahead = cost*window
// of 4 digits on an admission to a full bucket. token_bucket.lua tells the
// formats apart by length alone, so it reads those digits as binary: a base
// in the 25th century, an enormous ahead, and it rejects a request the
// stored state admits, with a retry of centuries. (Its first byte is an
// ASCII digit, never the first byte of a 7-byte µs time before 2^53.)
func TestAttackTokenBucketOlderTextOf21Bytes(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		// 2 per 5 ms, burst 2: T = 5000 units of 1/2 µs, capacity 10000.
		r := rule{alg: 3, window: 5000, limit: 2, param: 2, cost: 1}
		script := singleFor(r)
		now := startClock()
		key := prefix(t) + "k"
		// One token taken 1 µs ago: ahead 5000 (4 digits), 21 bytes.
		old := fmt.Sprintf("%d:%d", now-1, 5000)
		if len(old) != 21 {
			t.Fatalf("older text %q is %d bytes, want 21", old, len(old))
		}
		if err := c.Set(ctx, key, old, time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		got := ints(t, script.Run(ctx, c, []string{key}, singleArgs(now, 1)...).Val())
		// ahead 5000 - 2 = 4998; + 5000 = 9998 <= 10000: admitted, 0
		// left, the next token in ceil((9998 - 5000)/2) = 2499 µs.
		if want := []int64{now, 0, 1, 0, 2499, 0}; !slices.Equal(got, want) {
			t.Fatalf("on the older text %q: reply %v, want %v", old, got, want)
		}
	})
}
