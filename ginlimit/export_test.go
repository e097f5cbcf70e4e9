package ginlimit

// Test-only options, for the tests of this directory that are written
// from outside the package (package ginlimit_test): they make a bound
// that the defaults hold for a second long enough that no stall of a
// loaded machine can lapse it between two steps of a test.
var (
	MaxStalenessForTest = maxStaleness
	BreakerForTest      = withBreaker
)
