package rule

import (
	"strings"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/lua"
)

// TestLookupNamesEveryScript: the one table of algorithms has an entry for
// every algorithm script lua numbers, under the script's name, and none
// for a name it does not number.
func TestLookupNamesEveryScript(t *testing.T) {
	for _, name := range lua.Numbered() {
		a, ok := Lookup(name)
		switch {
		case name == penalty && ok:
			t.Errorf("Lookup(%q) found an algorithm: a Ban's script is no rule's choice", name)
		case name != penalty && (!ok || a.Name() != name):
			t.Errorf("Lookup(%q) = %v, %v", name, a, ok)
		}
	}
	if _, ok := Lookup("leaky_bucket"); ok {
		t.Error(`Lookup("leaky_bucket") found an algorithm lua does not have`)
	}
}

// TestInFlightRefusesRateSettings: an in-flight rule carries only its own
// settings, and a rate rule's that it has no use for is refused at
// start-up, naming the option.
func TestInFlightRefusesRateSettings(t *testing.T) {
	alg, _ := Lookup("sliding_log")
	base := Config{
		Common:   Common{Prefix: "p:", Message: "m"},
		Rate:     RateSettings{Alg: alg, Window: time.Second, Limit: 5, SubWindows: 10, Cost: 1},
		InFlight: InFlightConfig{N: 2, Lease: time.Second},
	}
	if _, err := Compile(base, Route{}, false); err != nil {
		t.Fatalf("an in-flight rule: %v", err)
	}
	for what, c := range map[string]func(*Config){
		"Cost":    func(c *Config) { c.Rate.Cost = 3 },
		"LimitBy": func(c *Config) { c.Rate.Plans = map[string]int{"pro": 9} },
		"Ban":     func(c *Config) { c.Rate.Ban = &BanConfig{After: 1, Within: time.Second, Duration: time.Second} },
	} {
		cfg := base
		c(&cfg)
		if _, err := Compile(cfg, Route{}, false); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("an in-flight rule with %s: %v, want an error naming it", what, err)
		}
	}
}
