package ginlimit

import (
	"fmt"
)

// DenyCache sets how many keys near or over their limit each rule of the
// route remembers in process; 0 turns the cache off. The default is
// [DefaultDenyCacheSize].
//
// A rejection is certain until the first moment the key's remaining quota
// can grow, on every instance, so the cache answers repeated requests on a
// rejected key without Redis until that moment: a flood on an over-limit
// key costs Redis one call per key per [DefaultMaxStaleness]. The
// answers are the ones Redis would give: a reset made with [Policy.Reset]
// is seen by every instance at once, and a change made behind ginlimit's
// back (a key deleted by hand, FLUSHALL, an eviction) within MaxStaleness,
// since nothing is kept longer. The cache is bounded by size
// (per rule) and safe for concurrent use. On a route with several [Rule]s,
// a request that one rule certainly rejects is rejected in process, since
// the rules are all or nothing.
func DenyCache(size int) Option {
	return routeOption(func(r *routeConfig) error {
		if size < 0 {
			return fmt.Errorf("DenyCache(%d): the size must be 0 (off) or positive", size)
		}
		r.deny = size
		return nil
	})
}
