package ginlimit

// The reference model of lua/inflight.lua, and random timelines of
// acquire, release, renew and peek run through the script (on miniredis
// and on a real redis-server) and through the model: every reply, and the
// live leases of every key after every step, must match
// (TestInFlightModelRandom).

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
	"github.com/ginlimit/ginlimit/internal/testtier"
	"github.com/ginlimit/ginlimit/lua"
)

// slotModel is what the in-flight script means, key by key: the leases
// held, each holder's lease end in µs. A lease whose end is at or before
// now has lapsed: it holds no slot, whether or not it is still stored.
type slotModel struct {
	limits, leases []int64
	held           []map[string]int64
}

func newSlotModel(limits, leases []int64) *slotModel {
	m := &slotModel{limits: limits, leases: leases}
	for range limits {
		m.held = append(m.held, map[string]int64{})
	}
	return m
}

// live returns how many leases of key i are live at now.
func (m *slotModel) live(i int, now int64) int64 {
	n := int64(0)
	for _, end := range m.held[i] {
		if end > now {
			n++
		}
	}
	return n
}

// acquire is the reply {fired, in_use...} of an acquire (record) or a peek
// (not record) by holder at now: the first key whose live leases fill its
// limit refuses; otherwise holder leases a slot of every key. An acquire
// then drops every lapsed lease.
func (m *slotModel) acquire(now int64, holder string, record bool) []int64 {
	reply := []int64{0}
	for i := range m.held {
		live := m.live(i, now)
		reply = append(reply, live)
		if reply[0] == 0 && live >= m.limits[i] {
			reply[0] = int64(i + 1)
		}
	}
	if !record {
		return reply
	}
	if reply[0] == 0 {
		for i := range m.held {
			m.held[i][holder] = now + m.leases[i]
			reply[1+i]++
		}
	}
	for i := range m.held {
		maps.DeleteFunc(m.held[i], func(_ string, end int64) bool { return end <= now })
	}
	return reply
}

// release removes holder's leases and returns how many were live.
func (m *slotModel) release(now int64, holder string) int64 {
	n := int64(0)
	for i := range m.held {
		if end, ok := m.held[i][holder]; ok {
			delete(m.held[i], holder)
			if end > now {
				n++
			}
		}
	}
	return n
}

// renew extends holder's live leases to now + lease, drops its lapsed
// ones, and returns how many it renewed.
func (m *slotModel) renew(now int64, holder string) int64 {
	n := int64(0)
	for i := range m.held {
		end, ok := m.held[i][holder]
		switch {
		case ok && end > now:
			m.held[i][holder] = now + m.leases[i]
			n++
		case ok:
			delete(m.held[i], holder)
		}
	}
	return n
}

// slotCase is one random timeline: the keys' limits and leases (µs).
type slotCase struct {
	limits, leases []int64
	steps          int
	seed           uint64
}

var slotCases = []slotCase{
	{limits: []int64{1}, leases: []int64{1000}, steps: 600, seed: 201},
	{limits: []int64{3}, leases: []int64{50_000}, steps: 800, seed: 202},
	{limits: []int64{10}, leases: []int64{7_300}, steps: 800, seed: 203},
	{limits: []int64{2, 5}, leases: []int64{20_000, 3_000}, steps: 800, seed: 204},
	{limits: []int64{4, 1, 3}, leases: []int64{1000, 9_000, 30_000}, steps: 800, seed: 205},
}

func TestInFlightModelRandom(t *testing.T) {
	testtier.Long(t)
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		for _, c := range slotCases {
			t.Run(fmt.Sprint(c.limits, c.leases), func(t *testing.T) {
				m := miniredis.RunT(t)
				client := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = client.Close() })
				var last int64
				runSlotCase(t, c, client, func(now int64) {
					if last != 0 {
						m.FastForward(time.Duration(now-last) * time.Microsecond)
					}
					m.SetTime(time.UnixMicro(now))
					last = now
				}, true)
			})
		}
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		client := redistest.Start(t).Client()
		for _, c := range slotCases {
			t.Run(fmt.Sprint(c.limits, c.leases), func(t *testing.T) {
				runSlotCase(t, c, client, nil, false)
			})
		}
	})
}

// runSlotCase runs c's timeline through the script on client, with the
// test clock, and through the model. setClock moves a miniredis's own
// clock (and TTLs) with the test clock; ttls says the TTLs then follow it,
// so a key that expired while a lease of it was live is a failure. On a
// real server, whose TTLs run on its own clock, every call is followed by
// a PERSIST of its keys in the same transaction.
func runSlotCase(t *testing.T, c slotCase, client *redis.Client, setClock func(int64), ttls bool) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x5eed))
	m := newSlotModel(c.limits, c.leases)
	base := "test:" + strconv.FormatUint(rng.Uint64(), 36) + ":{slots}"
	keys := make([]string, len(c.limits))
	for i := range keys {
		keys[i] = base + strconv.Itoa(i)
	}
	now := modelEpoch()
	maxLease := slices.Max(c.leases)
	var holders []string
	counts := map[string]int{}
	defer func() { t.Logf("%v", counts) }()
	// recent picks a holder among the latest, most of which are live.
	recent := func() string { return holders[max(0, len(holders)-8)+rng.IntN(min(8, len(holders)))] }
	run := func(op, holder string) []any {
		args := []any{now, op, holder}
		for i := range c.limits {
			args = append(args, c.limits[i], c.leases[i])
		}
		var cmd *redis.Cmd
		if setClock != nil {
			cmd = redis.NewScript(lua.InFlight()).Run(ctx, client, keys, args...)
		} else {
			_, _ = client.TxPipelined(ctx, func(p redis.Pipeliner) error {
				cmd = redis.NewScript(lua.InFlight()).Eval(ctx, p, keys, args...)
				p.Persist(ctx, keys[0])
				for _, k := range keys[1:] {
					p.Persist(ctx, k)
				}
				return nil
			})
		}
		reply, err := cmd.Slice()
		if err != nil {
			t.Fatalf("%s at %d: %v", op, now, err)
		}
		return reply
	}
	for step := range c.steps {
		switch rng.IntN(10) {
		case 0:
			now += maxLease + rng.Int64N(maxLease) // everything lapses
		case 1, 2, 3:
		default:
			now += rng.Int64N(maxLease / 6)
		}
		if setClock != nil {
			setClock(now)
		}
		var op, holder string
		var want []int64
		switch k := rng.IntN(10); {
		case k < 5 || len(holders) == 0:
			op, holder = "acquire", "h"+strconv.Itoa(step)
			want = m.acquire(now, holder, true)
			if want[0] == 0 {
				holders = append(holders, holder)
			}
		case k < 7:
			op, holder = "release", recent()
			want = []int64{m.release(now, holder)}
		case k < 9:
			op, holder = "renew", recent()
			want = []int64{m.renew(now, holder)}
		default:
			op, holder = "peek", "peek"
			want = m.acquire(now, holder, false)
		}
		reply := run(op, holder)
		var got []int64
		for i, v := range reply {
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("step %d %s: reply element %d is %T", step, op, i, v)
			}
			got = append(got, n)
		}
		if op == "acquire" || op == "peek" {
			if got[0] != now {
				t.Fatalf("step %d %s: now %d, want %d", step, op, got[0], now)
			}
			got = got[1:]
		}
		switch {
		case op == "acquire" && want[0] == 0:
			counts["admitted"]++
		case op == "acquire":
			counts["refused"]++
		case op == "peek":
			counts["peek"]++
		case want[0] > 0:
			counts[op+" live"]++
		default:
			counts[op+" lapsed or gone"]++
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d (t=%d µs) %s by %q: script %v, model %v", step, now-modelEpoch(), op, holder, got, want)
		}
		for i, k := range keys {
			live := map[string]int64{}
			zs, err := client.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, z := range zs {
				if end := int64(z.Score); end > now {
					live[z.Member.(string)] = end
				}
			}
			wantLive := maps.Clone(m.held[i])
			maps.DeleteFunc(wantLive, func(_ string, end int64) bool { return end <= now })
			if !maps.Equal(live, wantLive) {
				t.Fatalf("step %d (t=%d µs) %s: key %d holds %v, model %v", step, now-modelEpoch(), op, i, live, wantLive)
			}
			if ttls && len(wantLive) > 0 && client.Exists(ctx, k).Val() == 0 {
				t.Fatalf("step %d: key %d expired while %d leases were live", step, i, len(wantLive))
			}
		}
	}
}
