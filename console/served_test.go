package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestRouteServedElsewhereIsKnown: a route that one instance served is
// listed with its rule, after a beat of each, by an instance that never
// served it (a second one, or one started later), which then takes an
// override for it; a route another instance names but the application
// does not have is left out.
func TestRouteServedElsewhereIsKnown(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newInstance(t, srv.Client(), nil), newInstance(t, srv.Client(), nil)
	a.claim("u")
	ctx := context.Background()
	// Another instance's beat that names a route this application lacks.
	if err := srv.Client().ZAdd(ctx, keyRoutes, redisZ("0\nclaim\nGET /gone")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*instance{a, b} {
		if err := in.console.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	later := newInstance(t, srv.Client(), nil)
	if err := later.console.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]*instance{"the second instance": b, "an instance started later": later} {
		page := in.get("/console/", false).Body.String()
		if !strings.Contains(page, `data-rule="claim" data-route="GET /claim"`) || strings.Contains(page, `data-route=""`) || strings.Contains(page, "GET /gone") {
			t.Errorf("%s lists: %s", name, page)
		}
		if l := in.limiter.Rules(); len(l) != 1 || l[0].Route != "" {
			t.Fatalf("%s served the route: %+v", name, l)
		}
	}
	w := later.post("/console/api/override", url.Values{"route": {claimRoute}, "rule": {"claim"}, "limit": {"5"}}, "Accept", "application/json")
	if w.Code != http.StatusOK {
		t.Fatalf("override through an instance that never served the route: %d %s", w.Code, w.Body.String())
	}
	if page := later.get("/console/rule?route="+url.QueryEscape(claimRoute)+"&rule=claim", false).Body.String(); !strings.Contains(page, `data-field="limit">5<`) {
		t.Errorf("the rule's page after the override: %s", page)
	}
}

// redisZ is a member of a routes zset, as a beat adds it.
func redisZ(m string) redis.Z { return redis.Z{Score: float64(time.Now().UnixMilli()), Member: m} }
