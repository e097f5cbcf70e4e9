package ginlimit

import (
	"hash/maphash"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultLocalKeys is how many keys the in-process fallback of [FailLocal]
// remembers per rule.
const DefaultLocalKeys = 10_000

// LocalInstances tells the [FailLocal] fallback how many application
// instances share the rule: while Redis is down, each instance admits
// limit/n per window on its own, so together they stay near the limit. It
// must be at least 1; the default is 1.
func LocalInstances(n int) Option {
	return optionFunc(func(s *settings) {
		if n < 1 || n > 1e6 {
			s.invalid("LocalInstances(%d): want 1 to 1e6", n)
			return
		}
		s.localInstances = n
	})
}

// localLimiter is the in-process fallback of FailLocal: a token bucket per
// key (golang.org/x/time/rate) refilling limit/instances per window, with a
// burst of the same size. It approximates the rule; it is not shared between
// instances. It holds at most about DefaultLocalKeys keys, evicting an
// arbitrary one when full, and is safe for concurrent use.
type localLimiter struct {
	every    rate.Limit
	burst    int
	seed     maphash.Seed
	perShard int
	shards   [denyShards]localShard
}

type localShard struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newLocalLimiter(limit, instances int, window time.Duration) *localLimiter {
	n := max(1, limit/instances)
	l := &localLimiter{
		every:    rate.Limit(float64(n) / window.Seconds()),
		burst:    n,
		seed:     maphash.MakeSeed(),
		perShard: DefaultLocalKeys / denyShards,
	}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*rate.Limiter)
	}
	return l
}

// limiter returns key's bucket, making room when the shard is full.
func (l *localLimiter) limiter(key string) *rate.Limiter {
	s := &l.shards[maphash.String(l.seed, key)%denyShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	lim := s.m[key]
	if lim == nil {
		if len(s.m) >= l.perShard {
			for k := range s.m { // map order is random: evict any one
				delete(s.m, k)
				break
			}
		}
		lim = rate.NewLimiter(l.every, l.burst)
		s.m[key] = lim
	}
	return lim
}

// decide takes cost tokens from each key's bucket, all or none, and returns
// the decision of the first rule that refused (or of the last key).
func (p *Policy) decideLocal(keys []string, costs []int, locals []*Policy) Decision {
	now := time.Now()
	res := make([]*rate.Reservation, len(keys))
	var d Decision
	for i, key := range keys {
		lp := locals[i]
		lim := lp.local.limiter(key)
		r := lim.ReserveN(now, costs[i])
		res[i] = r
		d = Decision{Rule: lp.name, Allowed: true, Limit: lp.limit, Time: now, Local: true}
		if delay := r.DelayFrom(now); !r.OK() || delay > 0 {
			d.Allowed = false
			d.RetryAfter = delay
			if !r.OK() {
				d.RetryAfter = time.Duration(float64(time.Second) * float64(costs[i]) / float64(lp.local.every))
			}
			d.Reset = d.RetryAfter
			for _, prev := range res[:i+1] {
				prev.CancelAt(now)
			}
			return d
		}
		d.Remaining = max(0, int(lim.TokensAt(now)))
		d.Reset = time.Duration(float64(time.Second) / float64(lp.local.every))
	}
	return d
}
