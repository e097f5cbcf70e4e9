package ginlimit

import (
	"hash/maphash"
	"sync"
	"time"
)

// denyShards is the number of independently locked parts of a deny cache.
const denyShards = 16

// denyCache remembers, per Redis key, until when a rejection is certain.
//
// The sliding log admits nothing on a key until its oldest entry leaves the
// window: entries leave only by time (or by the key's TTL, which is later),
// and requests from any instance only add entries. So a rejection with reset
// r stays valid for r on every instance. The cache stores the deadline as
// (local monotonic time the request was sent) + r. The request was sent
// before Redis read its clock, so the local deadline never outlasts the true
// one; a cached answer is always the answer Redis would give.
//
// The one thing it cannot see is an out-of-band change to the key, such as an
// administrator deleting it: that is noticed when the cached deadline passes.
//
// The cache is bounded: each shard holds at most perShard entries; a full
// shard first drops expired entries and otherwise an arbitrary one. It is
// safe for concurrent use.
type denyCache struct {
	base     time.Time // origin of the monotonic clock
	seed     maphash.Seed
	perShard int
	shards   [denyShards]denyShard
	clock    func() int64 // tests only: replaces the monotonic clock
}

type denyShard struct {
	mu sync.RWMutex
	m  map[string]denyEntry
}

// denyEntry is one cached rejection.
type denyEntry struct {
	until   int64 // local monotonic nanoseconds since base
	resetAt int64 // Redis clock, Unix microseconds, when more quota comes
}

// newDenyCache returns a cache of about size entries, or nil if size is 0.
func newDenyCache(size int) *denyCache {
	if size <= 0 {
		return nil
	}
	c := &denyCache{base: time.Now(), seed: maphash.MakeSeed(), perShard: max(1, (size+denyShards-1)/denyShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denyEntry)
	}
	return c
}

// now returns the cache's monotonic clock in nanoseconds.
func (c *denyCache) now() int64 {
	if c.clock != nil {
		return c.clock()
	}
	return int64(time.Since(c.base))
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// get returns the rejection cached for key if it is still certain at now.
func (c *denyCache) get(key string, now int64) (denyEntry, bool) {
	s := c.shard(key)
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	return e, ok && now < e.until
}

// put caches a rejection of key.
func (c *denyCache) put(key string, e denyEntry, now int64) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok && len(s.m) >= c.perShard {
		for k, old := range s.m {
			if now >= old.until {
				delete(s.m, k)
			}
		}
		if len(s.m) >= c.perShard {
			for k := range s.m { // map order is random: evict any one
				delete(s.m, k)
				break
			}
		}
	}
	s.m[key] = e
}

// len returns the number of entries, expired ones included.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
