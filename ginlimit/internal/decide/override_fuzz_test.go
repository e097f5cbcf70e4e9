package decide

import (
	"testing"
	"time"

	"github.com/gin-gonic/gin"
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
	c := newMini(f)
	var policies []*Route
	for _, alg := range []string{"sliding_log", "sliding_counter", "fixed_window", "token_bucket"} {
		cfg := rate("fz:", "", 3, false)
		cfg.Rate.Alg, _ = rule.Lookup(alg)
		cfg.Rate.Window = time.Minute
		cfg.Users = identity.FromContext("uid")
		if err := rule.SetDims(&cfg.Common, "Per", []rule.Dim{rule.Builtin(2)}); err != nil {
			f.Fatal(err)
		}
		cfg.Rate.PlanPick = func(c *gin.Context) string { return c.GetHeader("X-Plan") }
		cfg.Rate.Plans = map[string]int{"pro": 4}
		policies = append(policies, newRoute(f, c, false, 10_000, cfg))
	}
	claim := rule.Scope{Method: "GET", Route: "/claim"}
	f.Fuzz(func(t *testing.T, field, value string) {
		if k, ok := fleet.ParseRuleField(field, IsField); ok && RuleField(k) != field {
			t.Fatalf("the field %q parses as %+v, which is written %q", field, k, RuleField(k))
		}
		set, valid := fleet.ParseSetting(value)
		for _, ov := range []*fleet.Overrides{
			fleet.NewOverrides([]string{field, value}, IsField),
			fleet.NewOverrides([]string{"fz:{GET /claim} *", value, "fz:{GET /claim user:alice}", value}, IsField),
		} {
			for _, p := range policies {
				v := &liveView{p: p, ov: ov, rules: map[overrideKey]*rule.Rate{}}
				for _, x := range withPlans(p.Rules[0]) {
					var w rule.Who
					if err := x.TargetWho(&w, rule.Target{User: "alice"}); err != nil {
						t.Fatal(err)
					}
					key := rule.BuildKey(&x.Base, p.Named, claim, &w)
					o := v.find(x, key, p.Named, claim)
					if o != nil && (!valid || o.Limit != set.Limit) {
						t.Fatalf("%s: the override %q %q applies with limit %d", x.Alg.Name(), field, value, o.Limit)
					}
				}
			}
		}
	})
}
