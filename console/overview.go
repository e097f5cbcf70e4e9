package console

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// views gathers what the pages and the JSON API show: the overview, a
// rule's page, an identity's count, the audit. It reads the fleet's shared
// view, and asks Redis only where a method says so.
type views struct {
	fleet     *fleet
	rdb       redis.UniversalClient
	appRoutes func() gin.RoutesInfo // Config.Routes; nil for none
}

// overview is what the overview page and /api/rules show.
type overview struct {
	Rules     []ruleRow
	Routes    []string // the application's routes, "GET /x"
	Instances int64    // -1 when Redis did not answer
	Failure   []string // the failure policies in use
	Breakers  []breakerRow
	Token     string
}

// ruleRow is one rule on one route.
type ruleRow struct {
	ginlimit.RuleInfo `json:"-"`
	Route, Rule       string
	Algorithm         string
	Limit             int
	WindowSeconds     float64
	Source            string
	Per               []string
	Plans             map[string]int
	Ban               string
	InFlight          bool
	OnFailure         string
	Link              string
}

// breakerRow is one Redis server's breaker.
type breakerRow struct{ Addr, State string }

// overviewOf gathers the overview: in process but for one call that
// counts the live instances.
func (v *views) overviewOf(ctx context.Context) overview {
	var ov overview
	seenRoute := map[string]bool{}
	failures := map[string]bool{}
	breakers := map[string]string{}
	for _, ri := range v.fleet.rules() {
		ov.Rules = append(ov.Rules, rowOf(ri))
		seenRoute[ri.Route] = true
		failures[string(ri.OnFailure)] = true
		for addr, st := range ri.Breakers {
			breakers[addr] = st
		}
	}
	if v.appRoutes != nil {
		for _, r := range v.appRoutes() {
			ov.Routes = append(ov.Routes, r.Method+" "+r.Path)
		}
		slices.Sort(ov.Routes)
	}
	for f := range failures {
		ov.Failure = append(ov.Failure, f)
	}
	slices.Sort(ov.Failure)
	for addr, st := range breakers {
		ov.Breakers = append(ov.Breakers, breakerRow{addr, st})
	}
	slices.SortFunc(ov.Breakers, func(a, b breakerRow) int { return compareStrings(a.Addr, b.Addr) })
	ov.Instances = v.instances(ctx)
	return ov
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// instances counts the live instances in ginlimit.InstancesKey.
func (v *views) instances(ctx context.Context) int64 {
	n, err := v.rdb.ZCount(ctx, ginlimit.InstancesKey, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return -1
	}
	return n
}

// rowOf describes ri for the pages and the API.
func rowOf(ri ginlimit.RuleInfo) ruleRow {
	row := ruleRow{RuleInfo: ri, Route: ri.Route, Rule: ri.Rule, Algorithm: string(ri.Algorithm), Limit: ri.Limit,
		WindowSeconds: ri.Window.Seconds(), Source: sourceName(ri.Source), Per: ri.Per, Plans: ri.Plans,
		InFlight: ri.Algorithm == "", OnFailure: string(ri.OnFailure), Link: ruleLink(ri.Route, ri.Rule)}
	if ri.BanAfter > 0 {
		row.Ban = strconv.Itoa(ri.BanAfter) + " refusals in " + ri.BanWithin.String() + " ban for " + ri.BanFor.String()
	}
	return row
}

// ruleLink is the rule page's address, relative to the console's root.
func ruleLink(route, rule string) string {
	return "rule?" + urlValues("route", route, "rule", rule)
}
