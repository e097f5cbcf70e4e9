package ginlimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// FailPolicy says what a route does when Redis cannot decide (an error or a
// timeout).
//
// A process that cannot get a decision to a healthy Redis in time
// ([ErrSaturated]) is not a Redis failure: it never opens the breaker, and
// it is never answered by letting the request through unlimited. Under
// FailClosed it is answered 503; under FailLocal and FailOpen the
// in-process fallback of FailLocal decides.
type FailPolicy int

const (
	// FailLocal, the default and the zero value, decides with an in-process
	// limiter of the same rules while Redis is failing: a token bucket per
	// key refilling limit/n per window, where n is [LocalInstances]. Its
	// decisions have Local set. It is bounded in memory (DefaultLocalKeys
	// keys per rule). A Redis outage then neither stops the service nor
	// lifts the limits: each instance enforces its share of them.
	FailLocal FailPolicy = iota
	// FailOpen allows the request and logs the error: a rate limiter outage
	// lets every request through, which an attacker who can slow Redis
	// down can use. Choose it only where the limit protects nothing.
	FailOpen
	// FailClosed answers 503 with a JSON body: a rate limiter outage becomes
	// a service outage.
	FailClosed
)

// String returns "FailLocal", "FailOpen" or "FailClosed".
func (p FailPolicy) String() string {
	switch p {
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	case FailLocal:
		return "FailLocal"
	}
	return fmt.Sprintf("FailPolicy(%d)", int(p))
}

// OnFailure sets what happens when Redis cannot decide. The default is
// [FailLocal].
func OnFailure(p FailPolicy) Option {
	return routeOption(func(r *routeConfig) error {
		if p < FailLocal || p > FailClosed {
			return fmt.Errorf("OnFailure(%v): want FailLocal, FailOpen or FailClosed", p)
		}
		r.onFail = p
		return nil
	})
}

// DefaultLocalKeys is how many keys the in-process fallback of [FailLocal]
// remembers per rule.
const DefaultLocalKeys = 10_000

// LocalInstances tells the [FailLocal] fallback how many application
// instances share the route's rules: while Redis is down, each instance
// admits limit/n per window on its own, so together they stay near the
// limit. It must be from 1 to 1e6; the default is 1.
func LocalInstances(n int) Option {
	return routeOption(func(r *routeConfig) error {
		if n < 1 || n > 1e6 {
			return fmt.Errorf("LocalInstances(%d): want 1 to 1e6", n)
		}
		r.localInstances = n
		return nil
	})
}

// failed is the decision, and the error, when Redis could not decide the
// calls of a request: the in-process fallback's under FailLocal, and
// otherwise the failure policy's. A saturated process (ErrSaturated) is not
// a Redis failure and never admits unlimited: FailOpen falls back like
// FailLocal there. The error names the rule and the scope's route, never
// the key, which holds the identity.
func (p *Policy) failed(req *request, err error) (Decision, error) {
	first := req.calls[0].rule
	if first.penalty {
		first = req.calls[1].rule // a ban's call comes before its rule's
	}
	saturated := errors.Is(err, ErrSaturated)
	err = fmt.Errorf("ginlimit: %s: %w", p.describe(req), err)
	if p.onFail == FailLocal || (saturated && p.onFail == FailOpen) {
		d := p.decideLocal(req)
		d.Err = err
		return d, err
	}
	return Decision{Rule: first.name, Allowed: p.onFail == FailOpen, Limit: first.limit, Err: err, decider: first}, err
}

// describe names what a request was limited by, for error texts: the route
// and the rules, never the identity.
func (p *Policy) describe(req *request) string {
	where := req.scope.label()
	if len(p.all) == 1 {
		r := p.all[0]
		if r.slots > 0 {
			return fmt.Sprintf("%s: rule %q (in-flight)", where, r.name)
		}
		return fmt.Sprintf("%s: rule %q (%v)", where, r.name, r.alg)
	}
	names := make([]string, 0, len(req.calls))
	for _, c := range req.calls {
		if !c.rule.penalty {
			names = append(names, c.rule.name)
		}
	}
	return fmt.Sprintf("%s: rules %q", where, names)
}

// decideLocal takes each call's cost from its rule's in-process bucket for
// its key, all or none, and returns the decision of the first rule that
// refused, or of the last rule.
func (p *Policy) decideLocal(req *request) Decision {
	now := time.Now()
	res := make([]*rate.Reservation, len(req.calls))
	var d Decision
	for i, c := range req.calls {
		if c.rule.penalty {
			continue // a ban is Redis's: the fallback does not ban
		}
		local := c.rule.local
		lim := local.limiter(c.key)
		r := lim.ReserveN(now, c.cost)
		res[i] = r
		d = Decision{Rule: c.rule.name, Allowed: true, Limit: c.rule.limit, Time: now, Local: true, decider: c.rule}
		if delay := r.DelayFrom(now); !r.OK() || delay > 0 {
			d.Allowed = false
			d.RetryAfter = delay
			if !r.OK() {
				d.RetryAfter = time.Duration(float64(time.Second) * float64(c.cost) / float64(local.every))
			}
			d.Reset = d.RetryAfter
			for _, prev := range res[:i+1] {
				if prev != nil {
					prev.CancelAt(now)
				}
			}
			return d
		}
		d.Remaining = max(0, int(lim.TokensAt(now)))
		d.Reset = time.Duration(float64(time.Second) / float64(local.every))
	}
	return d
}

// localLimiter is the in-process fallback of FailLocal for one rule: a
// token bucket per key (golang.org/x/time/rate) refilling limit/instances
// per window, with a burst of the same size. It approximates the rule; it
// is not shared between instances. It holds at most about DefaultLocalKeys
// keys, evicting an arbitrary one when full, and is safe for concurrent use.
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

// forget drops key's bucket (a reset): its next fallback decision starts
// from a full bucket.
func (l *localLimiter) forget(key string) {
	s := &l.shards[maphash.String(l.seed, key)%denyShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
