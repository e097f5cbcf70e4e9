package console

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestMountNamesMissingField: Mount refuses a Config without Limiter,
// Redis or Authorize, naming the field.
func TestMountNamesMissingField(t *testing.T) {
	srv := redistest.Start(t)
	l, err := ginlimit.New(ginlimit.Redis(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	auth := func(*gin.Context) (string, bool) { return "", true }
	for field, cfg := range map[string]Config{
		"Limiter":   {Redis: srv.Client(), Authorize: auth},
		"Redis":     {Limiter: l, Authorize: auth},
		"Authorize": {Limiter: l, Redis: srv.Client()},
	} {
		if _, err := Mount(gin.New(), cfg); err == nil || !strings.Contains(err.Error(), "Config."+field) {
			t.Errorf("without %s: %v", field, err)
		}
	}
}

// TestEveryAnswerNeedsAuthorization: no page, asset or API answer, and no
// action, is given without Authorize's yes; with it, each is.
func TestEveryAnswerNeedsAuthorization(t *testing.T) {
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), nil)
	in.claim("alice")
	rule := "route=" + url.QueryEscape(claimRoute) + "&rule=claim"
	gets := []string{"/console/", "/console/rule?" + rule, "/console/audit", "/console/console.css", "/console/favicon.svg",
		"/console/api/rules", "/console/api/rule?" + rule, "/console/api/audit"}
	for _, p := range gets {
		if w := in.get(p, true); w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "claim") {
			t.Errorf("GET %s without authorization: %d %q", p, w.Code, w.Body.String())
		}
		if w := in.get(p, false); w.Code != http.StatusOK {
			t.Errorf("GET %s: %d %q", p, w.Code, w.Body.String())
		}
	}
	for _, p := range []string{"/console/api/override", "/console/api/reset", "/console/api/lift", "/console/api/lookup", "/console/rule"} {
		req := in.post(p, url.Values{"route": {claimRoute}, "rule": {"claim"}, "limit": {"1"}}, "Authorization", "Bearer wrong")
		if req.Code != http.StatusUnauthorized {
			t.Errorf("POST %s without authorization: %d", p, req.Code)
		}
	}
	if l := in.limiter.Rules()[0].Limit; l != 2 {
		t.Errorf("an unauthorized override changed the limit to %d", l)
	}
}

// TestHeadersAndCrossSitePosts: every answer carries the CSP, nosniff
// and framing headers; a cross-site post, or a post that carries cookies
// without the form's token, is refused and changes nothing.
func TestHeadersAndCrossSitePosts(t *testing.T) {
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), nil)
	in.claim("alice")
	w := in.get("/console/", false)
	h := w.Header()
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
		h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers: %v", h)
	}
	if strings.Contains(w.Body.String(), "<script") {
		t.Error("a page holds a script")
	}
	form := url.Values{"route": {claimRoute}, "rule": {"claim"}, "limit": {"7"}}
	for name, hdr := range map[string][]string{
		"cross-site fetch": {"Sec-Fetch-Site", "cross-site"},
		"other origin":     {"Origin", "https://evil.example"},
		"null origin":      {"Origin", "null"},
		"cookie, no token": {"Cookie", "session=x"},
	} {
		if w := in.post("/console/api/override", form, hdr...); w.Code != http.StatusForbidden {
			t.Errorf("%s: %d %s", name, w.Code, w.Body.String())
		}
	}
	if l := in.limiter.Rules()[0].Limit; l != 2 {
		t.Fatalf("a refused post changed the limit to %d", l)
	}
	form.Set("token", in.console.token("tester"))
	if w := in.post("/console/api/override", form, "Cookie", "session=x", "Origin", "http://example.com", "Sec-Fetch-Site", "same-origin"); w.Code != http.StatusSeeOther {
		t.Errorf("same-origin post with its token: %d %s", w.Code, w.Body.String())
	}
	if l := in.limiter.Rules()[0].Limit; l != 7 {
		t.Errorf("the limit is %d after the override, want 7", l)
	}
	if w := in.get("/console/api/override", false); w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d", w.Code)
	}
}

// TestOverrideReachesSecondInstance: an override set through one
// instance's console is in force on the other within 1 s; a bad one gets
// SetLimit's message; both are audited.
func TestOverrideReachesSecondInstance(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newInstance(t, srv.Client(), nil), newInstance(t, srv.Client(), nil)
	a.claim("u")
	b.claim("u")
	w := a.post("/console/api/override", url.Values{"route": {claimRoute}, "rule": {"claim"}, "limit": {"5"}, "window_seconds": {"30"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("override: %d %s", w.Code, w.Body.String())
	}
	start := time.Now()
	for b.limiter.Rules()[0].Limit != 5 {
		if time.Since(start) > time.Second {
			t.Fatalf("the second instance still has limit %d after 1 s", b.limiter.Rules()[0].Limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w = a.post("/console/api/override", url.Values{"route": {claimRoute}, "rule": {"claim"}, "limit": {"200000"}}, "Accept", "application/json")
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "Limit") {
		t.Errorf("a bad override: %d %s", w.Code, w.Body.String())
	}
	page := b.get("/console/audit", false).Body.String()
	if !strings.Contains(page, "tester") || !strings.Contains(page, "limit 5 per 30s (override)") {
		t.Errorf("audit page: %s", page)
	}
}

// TestTrafficAndRefusedAcrossInstances: after a beat of each instance,
// either one shows both instances' decisions and refusals, the identities
// escaped, and the ban they caused, which a lift ends on every instance.
func TestTrafficAndRefusedAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	// Without a deny cache every refusal is Redis's, so the ban's strikes
	// count at once and the last request meets the ban.
	a, b := newInstance(t, srv.Client(), nil, ginlimit.DenyCache(0)), newInstance(t, srv.Client(), nil, ginlimit.DenyCache(0))
	evil := `<img src=x onerror=alert(1)>`
	for range 3 {
		a.claim(evil)
		b.claim(evil)
	}
	ctx := context.Background()
	for _, in := range []*instance{a, b, a} {
		if err := in.console.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var d rulePageData
	w := a.get("/console/api/rule?route="+url.QueryEscape(claimRoute)+"&rule=claim", false)
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatal(err, w.Body.String())
	}
	totals := map[string]int64{}
	for _, r := range d.Traffic {
		totals[r.Outcome] = r.Total
	}
	if totals["allowed"] != 2 || totals["limited"]+totals["banned"] != 4 || totals["banned"] == 0 {
		t.Errorf("traffic %v, want 2 allowed and 4 refused, some banned", totals)
	}
	id := "user:%3Cimg%20src=x%20onerror=alert%281%29%3E"
	if len(d.Refused) != 1 || d.Refused[0].Identity != id || d.Refused[0].Count != 4 {
		t.Errorf("refused %+v", d.Refused)
	}
	page := a.post("/console/rule", url.Values{"route": {claimRoute}, "rule": {"claim"}, "identity": {evil}}).Body.String()
	if strings.Contains(page, "<img") || !strings.Contains(page, html.EscapeString(evil)) {
		t.Errorf("the identity is not escaped: %s", page)
	}
	if !strings.Contains(page, `data-count="4"`) || !strings.Contains(page, `data-ban="`+id+`"`) || !strings.Contains(page, `data-field="remaining">0<`) {
		t.Errorf("page lacks the refused row, the ban or the lookup: %s", page)
	}
	w = b.post("/console/api/reset", url.Values{"route": {claimRoute}, "rule": {"claim"}, "identity": {"someone"}})
	if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || strings.Contains(loc, "someone") {
		t.Errorf("reset: %d, back to %q", w.Code, loc)
	}
	w = b.post("/console/api/lift", url.Values{"route": {claimRoute}, "rule": {"claim"}, "ban": {id}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("lift: %d %s", w.Code, w.Body.String())
	}
	if code := a.claim(evil); code != http.StatusOK {
		t.Errorf("after the lift, the other instance answers %d", code)
	}
}

// TestIdleBeatIsOneCall: a beat with nothing to share is one Redis call,
// counted by the server (the console has a server of its own here, so the
// limiter's heartbeats do not count).
func TestIdleBeatIsOneCall(t *testing.T) {
	srv, own := redistest.Start(t), redistest.Start(t)
	in := newInstance(t, srv.Client(), own.Client())
	ctx := context.Background()
	if err := in.console.Beat(ctx); err != nil { // loads the script
		t.Fatal(err)
	}
	admin := own.Client()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const beats = 4
	for range beats {
		if err := in.console.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if calls := commandCalls(t, admin); calls != beats {
		t.Errorf("%d idle beats made %d calls, want %d", beats, calls, beats)
	}
}

// commandCalls counts the calls clients made since CONFIG RESETSTAT:
// INFO commandstats' calls of the commands a client sends, EVALSHA and
// EVAL among them, but not those a script runs, which count under their
// own names; INFO and CONFIG (the test's own) are left out.
func commandCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	inScript := map[string]bool{"hincrby": true, "expire": true, "zincrby": true, "zremrangebyrank": true,
		"zadd": true, "zremrangebyscore": true, "zrange": true, "hgetall": true}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		name = strings.TrimPrefix(name, "cmdstat_")
		if !ok || name == "info" || strings.HasPrefix(name, "config") || inScript[name] {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		total += n
		t.Logf("%s: %d", name, n)
	}
	return total
}

// TestLiftHashedBan: with HashIdentities the refused list and the bans
// show only the keyed hash, the lookup of the identity typed finds that
// hash, and lifting the listed ban works without the identity.
func TestLiftHashedBan(t *testing.T) {
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), nil, ginlimit.DenyCache(0), ginlimit.HashIdentities([]byte(strings.Repeat("s", 32))))
	for range 6 {
		in.claim("mallory")
	}
	rule := "route=" + url.QueryEscape(claimRoute) + "&rule=claim"
	var d rulePageData
	if err := json.Unmarshal(in.get("/console/api/rule?"+rule, false).Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Bans) != 1 || !strings.HasPrefix(d.Bans[0].Identity, "user:") || len(d.Bans[0].Identity) != len("user:")+32 ||
		len(d.Refused) != 1 || d.Refused[0].Identity != d.Bans[0].Identity {
		t.Fatalf("bans %+v, refused %+v", d.Bans, d.Refused)
	}
	page := in.post("/console/rule", url.Values{"route": {claimRoute}, "rule": {"claim"}, "identity": {"mallory"}}).Body.String()
	if strings.Contains(page, "mallory\"") && !strings.Contains(page, `data-field="identity">`+d.Bans[0].Identity+`<`) {
		t.Errorf("the lookup does not show the hash: %s", page)
	}
	if strings.Count(page, d.Bans[0].Identity) < 3 {
		t.Errorf("the lookup's hash is not the listed one: %s", page)
	}
	if w := in.post("/console/api/lift", url.Values{"route": {claimRoute}, "rule": {"claim"}, "ban": {d.Bans[0].Identity}}); w.Code != http.StatusSeeOther {
		t.Fatalf("lift: %d %s", w.Code, w.Body.String())
	}
	if code := in.claim("mallory"); code != http.StatusOK {
		t.Errorf("after the lift: %d", code)
	}
	if page := in.get("/console/rule?"+rule, false).Body.String(); strings.Contains(page, "data-ban=") {
		t.Errorf("the lifted ban is still listed")
	}
}

// TestOverviewBeforeTraffic: before any request the overview lists every
// rule (without its route) and every route of the application, and counts
// the live instances once their heartbeats are in.
func TestOverviewBeforeTraffic(t *testing.T) {
	srv := redistest.Start(t)
	a := newInstance(t, srv.Client(), nil)
	newInstance(t, srv.Client(), nil)
	page := a.get("/console/", false).Body.String()
	if !strings.Contains(page, `data-rule="claim" data-route=""`) || !strings.Contains(page, `data-app-route="GET /claim"`) ||
		!strings.Contains(page, `data-app-route="POST /console/api/override"`) {
		t.Errorf("overview before traffic: %s", page)
	}
	a.claim("x")
	if page := a.get("/console/", false).Body.String(); !strings.Contains(page, `data-rule="claim" data-route="GET /claim"`) ||
		!strings.Contains(page, `data-field="limit">2<`) || !strings.Contains(page, `data-field="window">60<`) {
		t.Errorf("overview after a request: %s", page)
	}
	deadline := time.Now().Add(10 * ginlimit.HeartbeatPeriod)
	for {
		var ov overview
		if err := json.Unmarshal(a.get("/console/api/rules", false).Body.Bytes(), &ov); err != nil {
			t.Fatal(err)
		}
		if ov.Instances == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d instances, want 2", ov.Instances)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
