package metrics

import (
	"fmt"
	"math"

	"github.com/ginlimit/ginlimit/internal/obs"
)

// Defaults of a [Collector].
const (
	// DefaultNearLimitFraction is the fraction of the limit under which an
	// allowed decision's remaining quota counts as near the limit when no
	// [NearLimitFraction] is given.
	DefaultNearLimitFraction = obs.DefaultNearLimitFraction
	// DefaultMaxSeries is how many distinct (route, rule) label pairs a
	// Collector keeps when no [MaxSeries] is given.
	DefaultMaxSeries = obs.DefaultMaxSeries
)

// An Option configures a [Collector]. An invalid argument makes [New] panic,
// naming the option, the way a bad route makes gin panic at start-up.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is the configuration of a Collector.
type config struct {
	nearLimit float64
	maxSeries int
	errs      []error
}

func defaults() config {
	return config{nearLimit: DefaultNearLimitFraction, maxSeries: DefaultMaxSeries}
}

func (c *config) invalid(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("metrics: "+format, args...))
}

// NearLimitFraction sets when an allowed decision counts in
// ginlimit_near_limit_total: when its Remaining is less than f times its
// Limit. With f = 0.1 and a limit of 100, an admission that leaves 9 or fewer
// counts; with a limit of 3, only one that leaves 0. f must be from 0 (never
// count) to 1 (count every admission). The default is
// [DefaultNearLimitFraction].
func NearLimitFraction(f float64) Option {
	return optionFunc(func(c *config) {
		if math.IsNaN(f) || f < 0 || f > 1 {
			c.invalid("NearLimitFraction(%v): the fraction must be from 0 to 1", f)
			return
		}
		c.nearLimit = f
	})
}

// MaxSeries caps how many distinct (route, rule) label pairs the Collector
// keeps; the decisions of every pair seen after the first n are counted under
// route="other", rule="other" (see the package documentation for why). n must
// be at least 1. The default is [DefaultMaxSeries].
func MaxSeries(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.invalid("MaxSeries(%d): the cap must be at least 1", n)
			return
		}
		c.maxSeries = n
	})
}
