package ginlimit

import (
	"fmt"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
)

// Coherence: what an instance holds in process (the deny cache, and the
// FailLocal fallback's buckets) follows Redis within MaxStaleness, and
// sees a reset made with Policy.Reset at once, through the reset hub
// (package fleet's Hub) that a Limiter keeps per Redis client. Why, and
// how, is told in internal/fleet/hub.go.

// ResetChannel is the Redis pub/sub channel on which the instances of an
// application tell each other about resets (see [Policy.Reset]), changes
// of the overrides ([Policy.SetLimit]) and instances that join
// ([InstancesKey]). Each instance also hears its own echo on
// ResetChannel+":<its id>" (an ACL must allow both). Its messages carry
// Redis keys, never to be logged.
const ResetChannel = fleet.ResetChannel

// DefaultMaxStaleness bounds how long an instance may answer from what it
// holds in process about a key (the deny cache) without asking Redis
// again: a change made to Redis behind ginlimit's back, such as a key
// deleted by hand or a FLUSHALL, is seen by every instance within it, plus
// the round trip of the one call that then checks the key (at most twice
// it in all). A flood on an over-limit key costs Redis one call per key,
// per instance, per this bound. Resets made through [Policy.Reset] do not
// wait for it: every instance sees them at once.
const DefaultMaxStaleness = time.Second

// maxStaleness replaces [DefaultMaxStaleness], from 1 ms to 1 hour; tests
// lengthen it to keep what a deny cache learned on a loaded machine, or
// shorten it to watch it expire.
func maxStaleness(d time.Duration) Option {
	return routeOption(func(r *routeConfig) error {
		if d < time.Millisecond || d > time.Hour {
			return fmt.Errorf("maxStaleness(%v): want 1ms to 1h", d)
		}
		r.staleness = d
		return nil
	})
}
