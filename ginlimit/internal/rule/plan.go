package rule

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ginlimit/ginlimit/lua"
)

// maxPlans bounds how many plans one rule declares.
const maxPlans = 64

// CheckPlans checks the limits given to LimitBy.
func CheckPlans(limits map[string]int) error {
	if len(limits) == 0 || len(limits) > maxPlans {
		return fmt.Errorf("LimitBy: %d plans, want 1 to %d", len(limits), maxPlans)
	}
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		switch n := limits[name]; {
		case name == "" || len(name) > 64:
			return fmt.Errorf("LimitBy: plan %q: want a name of 1 to 64 bytes", name)
		case n < 1 || n > lua.MaxLimit:
			return fmt.Errorf("LimitBy: plan %q has limit %d, want 1 to 1e9", name, n)
		}
	}
	return nil
}
