package ginlimit

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"

	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
	"github.com/ginlimit/ginlimit/identity"
)

// FuzzOverrideValue: LimitsKey's fields and values are hand-editable, so
// each backend parses whatever it holds. Any field and value parse into an
// override that compiles for its rule or are left out, never a panic; a
// rule's field parses only in the form SetLimit writes; and an override
// that applies carries the limit its value says, for every algorithm.
func FuzzOverrideValue(f *testing.F) {
	for _, seed := range [][2]string{
		{"fz:{GET /claim} *", "5 0"},
		{"fz:{GET /claim} *", "5 60000000"},
		{"fz:{GET /claim user:alice}", "100000 1000"},
		{"fz:tier=pro:{GET /claim} *", "7 0"},
		{"fz:{* shared} rule:fz *", "2 0"},
		{"fz:{* allow} *", "3 0"},
		{"fz:{GET%20/claim} *", "-1 0"},
		{"fz:{GET /claim} *", "1000000000 2073600000000"},
		{"fz:{GET /claim} *", "9223372036854775807 9223372036854775807"},
		{"fz:{GET /claim} *", "5 -1"},
		{"fz:{GET /claim} *", " 5 0"},
		{"fz:{GET /claim} rule:%2A *", "5 0"},
		{"{GET /claim} *", "5 0"},
		{"fz:{GET /cl%ZZaim} *", "5 0"},
	} {
		f.Add(seed[0], seed[1])
	}
	mr := miniredis.RunT(f)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = c.Close() })
	l, err := New(Redis(c), UserIdentity(identity.FromContext("uid")))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = l.Close() })
	var policies []*Policy
	for _, alg := range []AlgorithmKind{SlidingLog, SlidingCounter, FixedWindow, TokenBucket} {
		p, err := l.Policy(Key("fz:"), Algorithm(alg), Limit(3), Window(time.Minute), Type(User),
			LimitBy(planOf, map[string]int{"pro": 4}))
		if err != nil {
			f.Fatal(err)
		}
		policies = append(policies, p)
	}
	claim := rule.Scope{Method: "GET", Route: "/claim"}
	f.Fuzz(func(t *testing.T, field, value string) {
		if k, ok := fleet.ParseRuleField(field, isField); ok && ruleField(k) != field {
			t.Fatalf("the field %q parses as %+v, which is written %q", field, k, ruleField(k))
		}
		set, valid := fleet.ParseSetting(value)
		for _, ov := range []*fleet.Overrides{
			fleet.NewOverrides([]string{field, value}, isField),
			fleet.NewOverrides([]string{"fz:{GET /claim} *", value, "fz:{GET /claim user:alice}", value}, isField),
		} {
			for _, p := range policies {
				v := &liveView{p: p, ov: ov, rules: map[overrideKey]*rule.Rate{}}
				for _, x := range withPlans(p.rules[0]) {
					var w rule.Who
					if err := x.TargetWho(&w, Target{User: "alice"}.forRule()); err != nil {
						t.Fatal(err)
					}
					key := rule.BuildKey(&x.Base, p.named, claim, &w)
					o := v.find(x, key, p.named, claim)
					if o != nil && (!valid || o.Limit != set.Limit) {
						t.Fatalf("%s: the override %q %q applies with limit %d", x.Alg.Name(), field, value, o.Limit)
					}
				}
			}
		}
	})
}
