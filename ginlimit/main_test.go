package ginlimit

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain runs four parallel tests per core rather than go test's one
// (-parallel defaults to GOMAXPROCS): most of this package's tests wait on
// redis-server, timers and sockets rather than compute, and one at a time
// per core they kept the package at 95 s on a quiet 2-core machine, with
// 40 s of CPU. A -parallel given on the command line wins.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
