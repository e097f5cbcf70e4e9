package ginlimit

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// olderLogMember is a member of the sliding log's ZSET, as the version
// before wrote it for an admission of cost 1: at (µs) and cum in 7 bytes
// each, then the units in the window in 4 (lua/sliding_log.lua, Upgrade).
func olderLogMember(at, cum int64) string {
	var b [8]byte
	out := make([]byte, 0, 18)
	binary.BigEndian.PutUint64(b[:], uint64(at))
	out = append(out, b[1:]...)
	binary.BigEndian.PutUint64(b[:], uint64(cum))
	out = append(out, b[1:]...)
	return string(binary.BigEndian.AppendUint32(out, uint32(cum)))
}

// TestSlidingLogUpgradedFullKeyRefusedUnderTheFailurePolicies: an identity
// whose ZSET log (the version before's key, full: 100,000 members under
// Limit(100000)) is upgraded is refused by Redis on every decision, with the
// default Timeout, under FailLocal and FailOpen: the upgrade costs Redis a
// bounded pass, so no call runs out of time and no failure policy answers
// for Redis. The older key shares the new key's hash slot, as the script
// needs.
func TestSlidingLogUpgradedFullKeyRefusedUnderTheFailurePolicies(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	ctx := context.Background()
	const limit, decisions = 100_000, 20
	for _, policy := range []FailPolicy{FailLocal, FailOpen} {
		pre := prefix(t)
		p := mustPolicy(t, Redis(c), Key(pre), Window(time.Hour), Limit(limit), DenyCache(0), OnFailure(policy), Timeout(DefaultTimeout))
		newKey := ruleKey(p, 0, "k")
		oldKey := rule.ZsetKey(&p.route.Rules[0].Base, newKey)
		if redistest.KeySlot(oldKey) != redistest.KeySlot(newKey) {
			t.Fatalf("the older key %q is in slot %d, the new key %q in %d", oldKey, redistest.KeySlot(oldKey), newKey, redistest.KeySlot(newKey))
		}
		// One member every 10 ms, from 1,000 s ago: all in the window.
		start := time.Now().Add(-1000 * time.Second).UnixMicro()
		// 5,000 members a ZADD: a loaded machine must not time them out.
		for from := int64(0); from < limit; from += 5000 {
			batch := make([]redis.Z, 0, 5000)
			for i := from; i < from+5000; i++ {
				at := start + i*10_000
				batch = append(batch, redis.Z{Score: float64(at), Member: olderLogMember(at, i+1)})
			}
			if err := c.ZAdd(ctx, oldKey, batch...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		admitted, local := 0, 0
		for range decisions {
			// A Redis failure comes with the failure policy's decision.
			d, err := p.Allow(ctx, "k", 1)
			if d.Allowed {
				admitted++
			}
			if err != nil || d.Local || d.Err != nil {
				local++
			}
		}
		t.Logf("%s: %d of %d decisions on the upgraded full key admitted, %d answered without Redis", policy, admitted, decisions, local)
		if admitted != 0 || local != 0 {
			t.Errorf("%s: %d of %d decisions on a full upgraded key admitted, %d answered without Redis; want every one refused by Redis", policy, admitted, decisions, local)
		}
	}
}
