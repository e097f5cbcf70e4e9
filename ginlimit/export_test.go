package ginlimit

import "github.com/ginlimit/ginlimit/ginlimit/internal/fleet"

// Test-only options, for the tests of this directory that are written
// from outside the package (package ginlimit_test): they make a bound
// that the defaults hold for a second long enough that no stall of a
// loaded machine can lapse it between two steps of a test.
var (
	MaxStalenessForTest = maxStaleness
	BreakerForTest      = withBreaker
)

// limitsVersionKey is the version of LimitsKey, which the tests write by
// hand.
const limitsVersionKey = fleet.LimitsVersionKey
