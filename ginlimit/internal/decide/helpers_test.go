package decide

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/engine"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/ginlimit/internal/state"
)

// t0 is a fixed Redis clock for miniredis tests: 2026-01-02 03:04:05 UTC.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newMini starts a miniredis whose TIME is t0 and returns a client of it.
func newMini(t testing.TB) *redis.Client {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rate is the settings of a rate rule as ginlimit's defaults and options
// give them: Key(prefix), Name(name) when not "", Limit(limit), and
// Ban(3, time.Minute, time.Minute) when ban.
func rate(prefix, name string, limit int, ban bool) rule.Config {
	alg, _ := rule.Lookup("sliding_log")
	c := rule.Config{
		Common: rule.Common{Prefix: prefix, Name: name, Message: "Too many requests, please try again later"},
		Rate:   rule.RateSettings{Alg: alg, Window: 10 * time.Second, Limit: limit, SubWindows: 10, Cost: 1},
	}
	if ban {
		c.Rate.Ban = &rule.BanConfig{After: 3, Within: time.Minute, Duration: time.Minute, Message: "banned"}
	}
	return c
}

// slots is the settings of an in-flight rule: InFlight(n, 30*time.Second).
func slots(prefix, name string, n int) rule.Config {
	c := rate(prefix, name, 20, false)
	c.InFlight = rule.InFlightConfig{N: n, Lease: 30 * time.Second}
	return c
}

// newRoute compiles cfgs into a route on c, as ginlimit's Limiter.Policy
// does (named: declared with Rule), with a deny cache of denySize keys.
func newRoute(t testing.TB, c redis.Scripter, named bool, denySize int, cfgs ...rule.Config) *Route {
	t.Helper()
	p := &Route{Named: named, Config: Config{Timeout: time.Second, Queue: time.Second, OnFail: FailLocal,
		RuleRoute: rule.Route{DenySize: denySize, Staleness: time.Second, Local: true, Instances: state.NewInstances(1)}}}
	for _, cfg := range cfgs {
		r, err := rule.Compile(cfg, p.RuleRoute, named)
		if err != nil {
			t.Fatal(err)
		}
		p.Add(r)
	}
	e, err := engine.New(engine.Config{Client: c}, Scripts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	p.Engine = e
	p.Ready(&Live{})
	return p
}

// leastAllocs is the least of five testing.AllocsPerRun(runs, f): see
// ginlimit's leastAllocs.
func leastAllocs(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range 4 {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
