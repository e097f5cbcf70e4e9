package ginlimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// FailPolicy says what a route does when Redis cannot decide (an error or a
// timeout).
//
// A process that cannot get a decision to a healthy Redis in time
// ([ErrSaturated]) is not a Redis failure: it never opens the breaker, no
// policy applies, and the request is refused with 503 (only Redis grants
// while Redis is healthy).
type FailPolicy int

const (
	// FailLocal, the default and the zero value, decides with an in-process
	// limiter of the same rules while Redis is failing: a token bucket per
	// key holding at most limit/n and refilling limit/n per window, where n
	// is [LocalInstances]. It continues from what Redis last said, never
	// from a full budget: a key Redis has answered for starts from the
	// remaining of that answer (less what the fallback admitted on it
	// within the window since) and refills only from the answer's reset; a
	// ban Redis reported holds. Only a key this instance has never seen,
	// or has forgotten, starts with limit/n. Its decisions have Local set.
	// It is bounded in memory (about DefaultLocalKeys keys per rule). A
	// Redis outage then neither stops the service nor lifts the limits:
	// each instance enforces its share of them.
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
// a Redis failure, and only Redis grants while Redis is healthy: it is
// refused under every policy (see [ErrSaturated]). The error names the
// rule and the scope's route, never the key, which holds the identity.
func (p *Policy) failed(req *request, err error) (Decision, error) {
	first := req.calls[0].rule
	if first.penalty {
		first = req.calls[1].rule // a ban's call comes before its rule's
	}
	saturated := errors.Is(err, ErrSaturated)
	err = fmt.Errorf("ginlimit: %s: %w", p.describe(req), err)
	if p.onFail == FailLocal && !saturated {
		d := p.decideLocal(req)
		d.Err = err
		return d, err
	}
	return Decision{Rule: first.name, Allowed: p.onFail == FailOpen && !saturated, Limit: first.limit, Err: err, decider: first}, err
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
// refused, or of the last rule. A ban Redis reported still refuses.
func (p *Policy) decideLocal(req *request) Decision {
	now := time.Now()
	var d Decision
	for i, c := range req.calls {
		local := c.rule.local
		if local == nil {
			continue
		}
		if c.rule.penalty {
			// The ban is Redis's: the fallback starts none, but keeps the
			// one Redis last reported, whose decision is its rule's.
			if left := local.banned(c.key, now); left > 0 {
				owner := req.calls[i+1].rule
				p.giveBack(req.calls[:i], now)
				return Decision{Rule: owner.name, Limit: owner.limit, RetryAfter: left, Reset: left, Time: now,
					Local: true, Banned: true, decider: c.rule}
			}
			continue
		}
		left, retry, ok := local.take(c.key, now, c.cost)
		d = Decision{Rule: c.rule.name, Allowed: ok, Limit: c.rule.limit, Remaining: left, Time: now, Local: true, decider: c.rule}
		if !ok {
			d.RetryAfter, d.Reset = retry, retry
			p.giveBack(req.calls[:i], now)
			return d
		}
		d.Reset = local.refillTime(1)
	}
	return d
}

// giveBack returns the costs that decideLocal took for calls, which a later
// rule refused.
func (p *Policy) giveBack(calls []call, now time.Time) {
	for _, c := range calls {
		if !c.rule.penalty && c.rule.local != nil {
			c.rule.local.give(c.key, now, c.cost)
		}
	}
}

// learn tells the fallback of each rule of req what Redis answered for its
// key (d, or each call's own decision when there are several), so that a
// fallback decision continues from it. sent is when the call was sent.
func (p *Policy) learn(req *request, d *Decision, each []Decision, sent time.Time) {
	for i := range req.calls {
		cl := &req.calls[i]
		if cl.rule.local == nil {
			continue
		}
		rd := d
		if each != nil {
			rd = &each[i]
		}
		cl.rule.local.learn(cl.key, rd, sent)
	}
}

// localLimiter is the in-process fallback of one rule, which decides while
// Redis cannot (FailLocal; never for ErrSaturated, which is refused): a
// token bucket per key, holding at most share = limit/instances units and
// refilling share per window.
//
// It continues from what Redis last said, never from a full budget: each
// answer Redis gives for a key (learn) sets the key's bucket to the
// remaining it reported (at most share), less what the fallback admitted on
// the key within the window before, and the refill starts only when that
// answer said quota grows (its Reset). So a key Redis has answered for
// keeps its last known remaining, a key it refused stays refused until its
// reset, and a ban Redis reported holds (banned). Only a key it has never
// seen here (or has forgotten, see below) starts with share units.
//
// The bucket of a key whose last answer left it at share or more is not
// kept: a new bucket holds share. It holds at most about DefaultLocalKeys
// keys; a full shard evicts, of a few keys looked at, one whose bucket is
// full again (forgetting it changes nothing), or else one at random. A
// bucket mirrors a Redis answer for at most the answer's reset plus one
// window (the time to refill). golang.org/x/time/rate cannot start a
// bucket's refill at a later time, which continuing from a refusal needs,
// so the bucket is written here. It is safe for concurrent use.
type localLimiter struct {
	share    float64
	perNs    float64 // refill, units per nanosecond; +Inf for a ban
	window   int64   // ns
	base     time.Time
	seed     maphash.Seed
	perShard int
	shards   [denyShards]localShard
}

type localShard struct {
	mu sync.Mutex
	m  map[string]*localBucket
}

// localBucket is one key's bucket. Times are ns since the limiter's base.
type localBucket struct {
	tokens   float64 // as of at
	at       int64
	from     int64   // the refill starts no earlier
	redisAt  int64   // Redis's time (µs) of the answer it continues from
	owed     float64 // units the fallback admitted, charged to Redis's answers
	owedTill int64   // until then (a window after the last of them)
}

// newLocalLimiter returns the fallback of a rule of limit per window over
// instances instances.
func newLocalLimiter(limit, instances int, window time.Duration) *localLimiter {
	share := float64(max(1, limit/instances))
	return newBuckets(share, share/float64(window), window)
}

// newBanLimiter returns the fallback's memory of the bans of a rule's Ban:
// a key is banned until its bucket's refill starts.
func newBanLimiter() *localLimiter {
	return newBuckets(1, math.Inf(1), 0)
}

func newBuckets(share, perNs float64, window time.Duration) *localLimiter {
	l := &localLimiter{share: share, perNs: perNs, window: int64(window), base: time.Now(), seed: maphash.MakeSeed(),
		perShard: DefaultLocalKeys / denyShards}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*localBucket)
	}
	return l
}

func (l *localLimiter) ns(t time.Time) int64 { return int64(t.Sub(l.base)) }

func (l *localLimiter) shard(key string) *localShard {
	return &l.shards[maphash.String(l.seed, key)%denyShards]
}

// refill brings b's tokens up to now.
func (l *localLimiter) refill(b *localBucket, now int64) {
	start := max(b.at, b.from)
	if now > start {
		b.tokens = min(l.share, b.tokens+float64(now-start)*l.perNs)
	}
	b.at = max(b.at, now)
}

// refillTime is how long the bucket takes to refill n units.
func (l *localLimiter) refillTime(n float64) time.Duration {
	return time.Duration(math.Ceil(n / l.perNs))
}

// bucket returns key's bucket, made full (share) when there is none, and
// making room for it when the shard is full. The shard's lock is held.
func (l *localLimiter) bucket(s *localShard, key string, now int64) *localBucket {
	if b := s.m[key]; b != nil {
		return b
	}
	if len(s.m) >= l.perShard {
		l.evict(s, now)
	}
	b := &localBucket{tokens: l.share, at: now}
	s.m[key] = b
	return b
}

// evict drops one key of a full shard: of a few looked at (map order is
// random), one whose bucket is full again and owes nothing, or else the
// last one looked at.
func (l *localLimiter) evict(s *localShard, now int64) {
	const sample = 8
	seen, victim := 0, ""
	for k, b := range s.m {
		victim = k
		if l.refill(b, now); b.tokens >= l.share && now >= b.owedTill {
			break
		}
		if seen++; seen == sample {
			break
		}
	}
	delete(s.m, victim)
}

// take takes cost units from key's bucket at now, if it holds them, and
// returns the units left; otherwise how long until it could.
func (l *localLimiter) take(key string, t time.Time, cost int) (left int, retry time.Duration, ok bool) {
	now := l.ns(t)
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := l.bucket(s, key, now)
	l.refill(b, now)
	c := float64(cost)
	if c > l.share {
		return int(b.tokens), l.refillTime(c), false
	}
	if b.tokens < c {
		wait := max(b.from-now, 0)
		return int(b.tokens), time.Duration(wait) + l.refillTime(c-b.tokens), false
	}
	b.tokens -= c
	b.owed += c
	b.owedTill = now + l.window
	return int(b.tokens), 0, true
}

// give returns cost units that take took at now (all or none: a later rule
// refused the request).
func (l *localLimiter) give(key string, t time.Time, cost int) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.m[key]; b != nil {
		b.tokens = min(l.share, b.tokens+float64(cost))
		b.owed = max(0, b.owed-float64(cost))
	}
}

// banned returns how long key's ban has left, as Redis last reported it;
// 0 when there is none.
func (l *localLimiter) banned(key string, t time.Time) time.Duration {
	now := l.ns(t)
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.m[key]; b != nil && b.from > now && b.tokens < 1 {
		return time.Duration(b.from - now)
	}
	return 0
}

// learn sets key's bucket from d, Redis's answer to a call sent at sent: to
// the remaining d reports, less what the fallback admitted in the window
// before, with the refill from d's reset on. An answer older (on Redis's
// clock) than the one the bucket has is ignored.
func (l *localLimiter) learn(key string, d *Decision, sent time.Time) {
	remaining := float64(d.Remaining)
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	now := l.ns(sent)
	if b == nil && remaining >= l.share {
		return // a new bucket holds share: nothing to keep
	}
	at := d.Time.UnixMicro()
	if b == nil {
		b = l.bucket(s, key, now)
	} else if at < b.redisAt {
		return
	}
	if now >= b.owedTill {
		b.owed = 0
	}
	b.redisAt, b.at = at, now
	b.tokens = max(0, min(l.share, remaining-b.owed))
	b.from = now + int64(d.Reset)
}

// forget drops key's bucket (a reset): its next fallback decision starts
// from a full bucket.
func (l *localLimiter) forget(key string) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
