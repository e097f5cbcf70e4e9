package lua

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/testtier"
)

// penaltyModel is penalty.lua in Go: the ban's end, the strikes and their
// window's start (set says whether there is one).
type penaltyModel struct {
	b, s, t int64
	set     bool
}

// step decides one request under the penalty, given whether the rule it
// guards refuses it, and returns the penalty's ok, remaining, reset and
// retry.
func (m *penaltyModel) step(now, window, limit, banMs, cost int64, refused, peek bool) (bool, int64, int64, int64) {
	if m.b > now {
		return false, 0, m.b - now, m.b - now
	}
	if !peek && cost > 1 {
		// The strikes the caller brings count before the request is
		// judged: when they make the ban, the request is refused by it.
		strikes := m.s
		if !m.set || m.t > now || now-m.t >= window {
			strikes = 0
		}
		if strikes+cost-1 >= limit {
			m.b, m.s, m.t, m.set = now+banMs*1000, 0, now, true
			return false, 0, banMs * 1000, banMs * 1000
		}
	}
	add := cost
	if !refused {
		add = cost - 1
	}
	if peek || add <= 0 {
		return true, 1e9, 0, 0
	}
	strikes, start := m.s, m.t
	if !m.set || start > now || now-start >= window {
		strikes, start = 0, now
	}
	strikes += add
	if strikes >= limit {
		m.b, m.s, m.t, m.set = now+banMs*1000, 0, now, true
		return true, 0, banMs * 1000, banMs * 1000
	}
	m.s, m.t, m.set = strikes, start, true
	return true, 1e9, 0, 0
}

// TestPenaltyMatchesItsModel runs seeded random sequences through a
// penalty guarding a fixed window that admits or refuses as the test
// chooses (cost 1 fits, a cost of the whole limit does not), with random
// gaps, strikes brought by the caller and Peeks, on miniredis and a real
// server; every reply must be the model's.
func TestPenaltyMatchesItsModel(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	onBackends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		names := append(Algorithms(), "penalty")
		pen := len(names) - 1
		several := redis.NewScript(Several())
		peekScript := redis.NewScript(Peek())
		fixed := number(t, "fixed_window")
		for _, s := range []*redis.Script{several, peekScript} {
			if err := s.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for seed, cfg := range []struct{ window, limit, banMs int64 }{
			{10e6, 20, 60_000}, {1e6, 3, 500}, {5e6, 1, 2_000}, {2e6, 7, 100},
		} {
			p := prefix(t)
			keys := []string{p + "ban", p + "rate"}
			rng := rand.New(rand.NewPCG(uint64(seed), 3))
			clock := startClock()
			var m penaltyModel
			bans := 0
			for step := range 400 {
				clock += rng.Int64N(cfg.window / cfg.limit)
				refused := step > 0 && rng.IntN(4) > 0
				rateCost := int64(1)
				if refused {
					rateCost = 1e9
				}
				cost := 1 + rng.Int64N(3)
				peek := step > 0 && rng.IntN(8) == 0
				script := several
				if peek {
					script = peekScript
				}
				var cmd *redis.Cmd
				_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					cmd = script.EvalSha(ctx, pipe, keys, args(clock,
						rule{alg: pen, window: cfg.window, limit: cfg.limit, param: cfg.banMs, cost: cost},
						rule{alg: fixed, window: 1e15, limit: 1e9, cost: rateCost})...)
					for _, k := range keys {
						pipe.Persist(ctx, k)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%v step %d: %v", cfg, step, err)
				}
				got := ints(t, cmd.Val())
				ok, remaining, reset, retry := m.step(clock, cfg.window, cfg.limit, cfg.banMs, cost, refused, peek)
				wantFired := int64(0)
				switch {
				case !ok:
					wantFired = 1
				case refused:
					wantFired = 2
				}
				okInt := int64(0)
				if ok {
					okInt = 1
				}
				if got[1] != wantFired || got[2] != okInt || got[3] != remaining || got[4] != reset || got[5] != retry {
					t.Fatalf("%v step %d (refused %v, cost %d, peek %v): got fired %d and %v, want fired %d and [%d %d %d %d]",
						cfg, step, refused, cost, peek, got[1], got[2:6], wantFired, okInt, remaining, reset, retry)
				}
				if remaining == 0 {
					bans++
				}
			}
			if bans == 0 {
				t.Errorf("%v: no ban in the sequence: it does not exercise one", cfg)
			}
		}
	})
}
