package state

import (
	"math"
	"time"
)

// Buckets is the in-process fallback of one rule, which decides while
// Redis cannot: a token bucket per key, holding at most share units and
// refilling share per window.
//
// It continues from what Redis last said, never from a full budget: each
// answer Redis gives for a key (Learn) sets the key's bucket to the
// remaining it reported (at most share), less what the fallback admitted on
// the key within the window before, and the refill starts only when that
// answer said quota grows (its Reset). So a key Redis has answered for
// keeps its last known remaining, a key it refused stays refused until its
// reset, and a ban Redis reported holds (Banned). Only a key it has never
// seen here (or has forgotten, see below) starts with share units.
//
// The bucket of a key whose last answer left it at share or more is not
// kept: a new bucket holds share. It holds about the keys it was made
// with; a full part evicts, of a few keys looked at, those whose bucket is
// full again (forgetting them changes nothing), or else one at random. A
// bucket mirrors a Redis answer for at most the answer's reset plus one
// window (the time to refill). golang.org/x/time/rate cannot start a
// bucket's refill at a later time, which continuing from a refusal needs,
// so the bucket is written here. It is safe for concurrent use.
type Buckets struct {
	share  float64
	perNs  float64 // refill, units per nanosecond; +Inf for a ban
	window int64   // ns
	base   time.Time
	keys   *Shards[*bucket]
}

// bucket is one key's bucket. Times are ns since the Buckets' base.
type bucket struct {
	tokens   float64 // as of at
	at       int64
	from     int64   // the refill starts no earlier
	redisAt  int64   // Redis's time (µs) of the answer it continues from
	owed     float64 // units the fallback admitted, charged to Redis's answers
	owedTill int64   // until then (a window after the last of them)
}

// NewBuckets returns the fallback of a rule of limit per window over
// instances instances, holding about keys keys.
func NewBuckets(limit, instances int, window time.Duration, keys int) *Buckets {
	share := float64(max(1, limit/instances))
	return newBuckets(share, share/float64(window), window, keys)
}

// NewBans returns the fallback's memory of the bans of a rule's ban,
// holding about keys keys: a key is banned until its bucket's refill
// starts, as Redis last reported (Learn, Banned).
func NewBans(keys int) *Buckets {
	return newBuckets(1, math.Inf(1), 0, keys)
}

func newBuckets(share, perNs float64, window time.Duration, keys int) *Buckets {
	return &Buckets{share: share, perNs: perNs, window: int64(window), base: time.Now(), keys: NewShards[*bucket](keys)}
}

func (l *Buckets) ns(t time.Time) int64 { return int64(t.Sub(l.base)) }

// refill brings b's tokens up to now.
func (l *Buckets) refill(b *bucket, now int64) {
	start := max(b.at, b.from)
	if now > start {
		b.tokens = min(l.share, b.tokens+float64(now-start)*l.perNs)
	}
	b.at = max(b.at, now)
}

// refillTime is how long a bucket takes to refill n units.
func (l *Buckets) refillTime(n float64) time.Duration {
	return time.Duration(math.Ceil(n / l.perNs))
}

// UnitRefill returns how long a bucket takes to refill one unit: the reset
// of a decision the fallback admitted.
func (l *Buckets) UnitRefill() time.Duration { return l.refillTime(1) }

// bucket returns key's bucket, made full (share) when there is none, and
// making room for it when its part is full. The part's lock is held.
func (l *Buckets) bucket(s *Shard[*bucket], key string, now int64) *bucket {
	if b, _ := s.Get(key); b != nil {
		return b
	}
	if s.Full() {
		s.Evict(func(_ string, b *bucket) Pick {
			if l.refill(b, now); b.tokens >= l.share && now >= b.owedTill {
				return Stale
			}
			return Idle
		})
	}
	b := &bucket{tokens: l.share, at: now}
	s.Put(key, b)
	return b
}

// Take takes cost units from key's bucket at t, if it holds them, and
// returns the units left; otherwise how long until it could.
func (l *Buckets) Take(key string, t time.Time, cost int) (left int, retry time.Duration, ok bool) {
	now := l.ns(t)
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
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

// Give returns cost units that Take took (all or none: a later rule
// refused the request).
func (l *Buckets) Give(key string, cost int) {
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	if b, _ := s.Get(key); b != nil {
		b.tokens = min(l.share, b.tokens+float64(cost))
		b.owed = max(0, b.owed-float64(cost))
	}
}

// Banned returns how long key's ban has left at t, as Redis last
// reported it; 0 when there is none.
func (l *Buckets) Banned(key string, t time.Time) time.Duration {
	now := l.ns(t)
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	if b, _ := s.Get(key); b != nil && b.from > now && b.tokens < 1 {
		return time.Duration(b.from - now)
	}
	return 0
}

// Learn sets key's bucket from a, Redis's answer to a call sent at sent:
// to the remaining a reports, less what the fallback admitted in the
// window before, with the refill from a's reset on. An answer older (on
// Redis's clock) than the one the bucket has is ignored.
func (l *Buckets) Learn(key string, a Answer, sent time.Time) {
	remaining := float64(a.Remaining)
	s := l.keys.Shard(key)
	s.Lock()
	defer s.Unlock()
	b, _ := s.Get(key)
	now := l.ns(sent)
	if b == nil && remaining >= l.share {
		return // a new bucket holds share: nothing to keep
	}
	at := a.At.UnixMicro()
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
	b.from = now + int64(a.Reset)
}

// Forget drops key's bucket (a reset): its next decision starts from a
// full bucket.
func (l *Buckets) Forget(key string) { l.keys.Delete(key) }
