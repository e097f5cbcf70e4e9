// Package testtier splits the suite in two. The default tier, which the
// README's test command runs, covers every safety property at least once on
// a real redis-server. The long tier adds the tests that explore the same
// properties further (random model timelines, fault injection, soak and
// overload runs) and runs only with GINLIMIT_LONG=1, as CI sets it.
package testtier

import (
	"os"
	"testing"
)

// LongEnv is the environment variable that turns the long tier on.
const LongEnv = "GINLIMIT_LONG"

// Long skips t unless GINLIMIT_LONG=1. A test of the long tier calls it
// first, before it starts anything.
func Long(t testing.TB) {
	t.Helper()
	if os.Getenv(LongEnv) != "1" {
		t.Skipf("long tier: runs with %s=1 (CI sets it)", LongEnv)
	}
}
