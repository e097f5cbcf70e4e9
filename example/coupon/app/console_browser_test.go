package app_test

import (
	"encoding/json"
	"flag"
	"html"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/example/coupon/app"
	"github.com/ginlimit/ginlimit/internal/browsertest"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// The console's tests drive the demo's console in a real browser, through
// the markup contract of issue 33's "Testable markup": data-rule and
// data-route on each rule, data-field="limit" and "window" inside it,
// data-form="override" and "lookup", data-field="remaining", data-ban rows
// with a data-action="lift" button, data-action="open" links to a rule's
// own page.

// claimRule and merchantRule select the claim and merchant rules' elements.
const (
	claimRule    = `[data-rule="coupon:claim"][data-route="GET /api/coupon/claim"]`
	merchantRule = `[data-rule="coupon:merchant"][data-route="GET /api/coupon/merchant"]`
)

// hostile is what an attacker types where the console echoes text back.
const hostile = `<img src=x onerror=alert(1)>`

// fleet is two demo instances on one real redis-server, each served on
// loopback as two replicas behind a load balancer would be.
type fleet struct {
	engineA    *gin.Engine
	a, b       http.Handler
	appA, appB *app.App
	urlA, urlB string
	// posted is when A last received a POST to the console.
	posted stamp
}

// stamp is a time one goroutine sets and another reads.
type stamp struct {
	mu sync.Mutex
	at time.Time
}

func (s *stamp) set(t time.Time) { s.mu.Lock(); s.at = t; s.mu.Unlock() }
func (s *stamp) get() time.Time  { s.mu.Lock(); defer s.mu.Unlock(); return s.at }

// startFleet starts a redis-server and the two instances A and B.
func startFleet(t *testing.T) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	cfg := app.Config{RedisURL: "redis://" + srv.Addr + "/0", JWTSecret: testSecret, IdentitySecret: testIdentitySecret,
		Logger: slog.New(slog.DiscardHandler)}
	f := &fleet{appA: newAppOf(t, cfg), appB: newAppOf(t, cfg)}
	f.a, f.b = f.appA.Handler, f.appB.Handler
	f.engineA = f.a.(*gin.Engine)
	sa := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, app.ConsolePath) {
			f.posted.set(time.Now())
		}
		f.a.ServeHTTP(w, r)
	}))
	sb := httptest.NewServer(f.b)
	t.Cleanup(sa.Close)
	t.Cleanup(sb.Close)
	f.urlA, f.urlB = sa.URL, sb.URL
	return f
}

// signIn signs tab in to base's console through its sign-in page, and
// waits for the overview.
func signIn(t *testing.T, tab *browsertest.Browser, base string) {
	t.Helper()
	tab.Do(t, chromedp.Navigate(base+app.ConsoleSignInPath),
		chromedp.SetValue(chromedp.CSS(`textarea[name="token"]`), token(t, "ops", app.AdminRole)))
	resp := tab.Response(t, chromedp.Click(chromedp.CSS(`[data-form="sign-in"] [type="submit"]`)))
	if resp.Status != http.StatusOK || !strings.HasSuffix(resp.URL, app.ConsolePath) {
		t.Fatalf("sign in: %d %s, want 200 from the console's overview", resp.Status, resp.URL)
	}
	tab.Do(t, chromedp.WaitVisible(chromedp.CSS(`[data-rule]`)))
}

// openRule shows the rule sel selects with its forms, in the overview or
// on the rule's own page, and returns the selector of the element that
// holds its forms.
func openRule(t *testing.T, tab *browsertest.Browser, base, sel string) string {
	t.Helper()
	tab.Do(t, chromedp.Navigate(base+app.ConsolePath), chromedp.WaitVisible(chromedp.CSS(sel)))
	if hasNode(t, tab, sel+` [data-form="override"]`) {
		return sel
	}
	tab.Do(t, chromedp.Click(chromedp.CSS(sel+` [data-action="open"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-form="override"]`)))
	return "body"
}

// hasNode says whether the tab's page has an element sel selects.
func hasNode(t *testing.T, tab *browsertest.Browser, sel string) bool {
	t.Helper()
	return browsertest.Run(t, tab, chromedp.Evaluate[bool](`document.querySelector(`+strconv.Quote(sel)+`) !== null`))
}

// fill sets the named inputs of the form sel selects and submits it with
// its submit button.
func fill(t *testing.T, tab *browsertest.Browser, sel string, fields map[string]string) {
	t.Helper()
	for name, v := range fields {
		tab.Do(t, chromedp.SetValue(chromedp.CSS(sel+` [name="`+name+`"]`), v))
	}
	tab.Do(t, chromedp.Click(chromedp.CSS(sel+` [type="submit"]`)))
}

// textOf is the JavaScript of the trimmed text of the first element sel
// selects.
func textOf(sel string) string {
	return `(document.querySelector(` + strconv.Quote(sel) + `)?.textContent ?? "").trim()`
}

// claimLimitOn is the limit and source h has in force for the claim rule,
// read through the demo's admin API as admin (each read is one of the
// admin's 60 a minute, so a poll rotates admins).
func claimLimitOn(t *testing.T, h http.Handler, admin string) app.ClaimSettings {
	t.Helper()
	w := serve(t, h, req{target: "/api/admin/limits/claim", token: token(t, admin, app.AdminRole)})
	if w.Code != http.StatusOK {
		t.Fatalf("GET /api/admin/limits/claim: %d %s", w.Code, w.Body)
	}
	var s app.ClaimSettings
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// clearClaimOverride takes the claim rule back to its configuration.
func clearClaimOverride(t *testing.T, h http.Handler) {
	t.Helper()
	if w := putLimit(t, h, `{"limit": 0}`); w.Code != http.StatusOK {
		t.Fatalf("clear the claim override: %d %s", w.Code, w.Body)
	}
}

// send sends a request of method to rawURL, with the header (name, value)
// when name is not empty, and returns the status and body.
func send(t *testing.T, method, rawURL, name, value string) (int, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		r.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	return resp.StatusCode, string(body)
}

// pageRef finds the URLs a page refers to: links, assets, form targets.
var pageRef = regexp.MustCompile(`\s(href|src|action)="([^"]*)"`)

// consoleRefs are the URLs of the console that page, served at pageURL,
// refers to, by "<METHOD> <url>": GET for a link or an asset, POST for a
// form's target; the sign-in page is left out.
func consoleRefs(t *testing.T, pageURL, page string) map[string]string {
	t.Helper()
	base, err := url.Parse(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range pageRef.FindAllStringSubmatch(page, -1) {
		u, err := base.Parse(html.UnescapeString(m[2]))
		if err != nil || u.Host != base.Host || !strings.HasPrefix(u.Path, app.ConsolePath) || u.Path == app.ConsoleSignInPath {
			continue
		}
		u.Fragment = ""
		method := http.MethodGet
		if m[1] == "action" {
			method = http.MethodPost
		}
		out[method+" "+u.String()] = u.String()
	}
	return out
}

// limitedRoutes are the demo's limited routes, each with its rule's name.
var limitedRoutes = map[string]string{
	"POST /api/login":                            "coupon:login",
	"GET /api/coupon/seckill":                    "coupon:seckill",
	"GET /api/coupon/seckill/order":              "coupon:order",
	"GET /api/coupon/claim":                      "coupon:claim",
	"GET /api/vouchers/:id/claim":                "voucher:claim",
	"GET /api/coupon/merchant":                   "coupon:merchant",
	"GET /voucher-order/seckill/:id":             "voucher:seckill",
	"GET /api/admin/limits/claim/users/:user":    "coupon:admin",
	"DELETE /api/admin/limits/claim/users/:user": "coupon:admin",
	"GET /api/admin/limits/claim":                "coupon:admin",
	"PUT /api/admin/limits/claim":                "coupon:admin",
}

// demoRoutes are engine's routes outside the console, as "METHOD /path".
func demoRoutes(engine *gin.Engine) []string {
	var out []string
	for _, r := range engine.Routes() {
		if !strings.HasPrefix(r.Path, app.ConsolePath) {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// consoleURLs are the console's routes of engine as URLs under base, with
// each parameter filled in, so that a request reaches its handler.
func consoleURLs(engine *gin.Engine, base string) map[string]string {
	out := map[string]string{}
	for _, r := range engine.Routes() {
		if !strings.HasPrefix(r.Path, app.ConsolePath) || r.Path == app.ConsoleSignInPath {
			continue
		}
		segs := strings.Split(r.Path, "/")
		for i, s := range segs {
			if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
				segs[i] = "coupon:claim"
			}
		}
		out[r.Method+" "+r.Path] = base + strings.Join(segs, "/")
	}
	return out
}

// TestConsoleRefusesWithoutAuthorization: every route of the console, and
// every page, asset and form target its overview links to, is refused
// (401 or 403, with none of the console's content) to a request without a
// token, with a token that is not an admin's, with a forged one, and with
// such tokens in the sign-in cookie; the same requests with the admin's
// token are answered, so the refusals are not for a path that is not
// there. The sign-in page is the one exception.
func TestConsoleRefusesWithoutAuthorization(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	admin := token(t, "ops", app.AdminRole)
	status, overview := send(t, http.MethodGet, f.urlA+app.ConsolePath, "Authorization", "Bearer "+admin)
	if status != http.StatusOK || !strings.Contains(overview, `data-rule="coupon:claim"`) {
		t.Fatalf("the overview with the admin's token: %d, want 200 with the claim rule:\n%.2000s", status, overview)
	}
	targets := consoleURLs(f.engineA, f.urlA)
	maps.Copy(targets, consoleRefs(t, f.urlA+app.ConsolePath, overview))
	if len(targets) < 3 {
		t.Fatalf("only %d console URLs found: %v", len(targets), targets)
	}
	for what, u := range consoleRefs(t, f.urlA+app.ConsolePath, overview) {
		if method, _, _ := strings.Cut(what, " "); method == http.MethodGet {
			if status, body := send(t, method, u, "Authorization", "Bearer "+admin); status != http.StatusOK {
				t.Errorf("%s with the admin's token: %d, want 200; body %.300s", what, status, body)
			}
		}
	}
	alice := token(t, "alice", "")
	forged, _ := app.NewToken([]byte("not-the-demo-secret-0123456789abcdef"), "ops", app.Grants{Role: app.AdminRole}, time.Now())
	creds := []struct{ name, header, value string }{
		{"nothing", "", ""},
		{"a user's token", "Authorization", "Bearer " + alice},
		{"a forged admin token", "Authorization", "Bearer " + forged},
		{"a user's token in the cookie", "Cookie", app.ConsoleCookie + "=" + alice},
		{"a forged admin token in the cookie", "Cookie", app.ConsoleCookie + "=" + forged},
		{"the admin's token under another scheme", "Authorization", "Basic " + admin},
	}
	for what, u := range targets {
		method, _, _ := strings.Cut(what, " ")
		for _, c := range creds {
			status, body := send(t, method, u, c.header, c.value)
			if status != http.StatusUnauthorized && status != http.StatusForbidden {
				t.Errorf("%s (%s) with %s: %d, want 401 or 403; body %.300s", what, u, c.name, status, body)
			}
			if strings.Contains(body, "data-rule") || strings.Contains(body, "coupon:claim") {
				t.Errorf("%s with %s: the refusal shows the console's content: %.300s", what, c.name, body)
			}
		}
	}
}

// TestConsoleInBrowser drives A's console in headless Chromium, signed in
// through the sign-in page, with B, a second instance on the same Redis,
// as the witness of every change; each step has a tab of its own, and
// none may leave an error in the browser's console.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	warmUp(t, f)
	br := browsertest.Start(t)
	var tabs []*browsertest.Browser
	// tab is a signed-in tab for what an operator does, whose console
	// must stay free of errors; probe one for a test that provokes
	// refusals, which the browser reports there as errors.
	probe := func(t *testing.T) *browsertest.Browser {
		tb := br.Tab(t)
		signIn(t, tb, f.urlA)
		return tb
	}
	tab := func(t *testing.T) *browsertest.Browser {
		tb := probe(t)
		tabs = append(tabs, tb)
		return tb
	}
	t.Run("refused before sign-in", func(t *testing.T) { refusedBeforeSignIn(t, f, br.Tab(t)) })
	t.Run("overview lists every route", func(t *testing.T) { overviewListsEveryRoute(t, f, tab(t)) })
	t.Run("the second instance lists the routes the first served", func(t *testing.T) { routesServedOnAListedOnB(t, f, tab(t)) })
	t.Run("override is applied by the second instance", func(t *testing.T) { overrideReachesB(t, f, tab(t)) })
	t.Run("a refused override shows the reason", func(t *testing.T) { refusedOverride(t, f, tab(t)) })
	t.Run("lookup shows the remaining count and reset restores it", func(t *testing.T) { lookupAndReset(t, f, tab(t)) })
	t.Run("a ban is listed and lifted", func(t *testing.T) { banListedAndLifted(t, f, tab(t)) })
	t.Run("hostile input stays inert", func(t *testing.T) { hostileInputInert(t, f, tab(t), probe(t)) })
	t.Run("a cross-site form post is refused", func(t *testing.T) { crossSitePostRefused(t, f, probe(t)) })
	for i, tb := range tabs {
		if p := tb.Problems(); len(p) != 0 {
			t.Errorf("tab %d: the browser's console shows errors: %q", i, p)
		}
		if d := tb.Dialogs(); len(d) != 0 {
			t.Errorf("tab %d: dialogs opened: %q", i, d)
		}
	}
}

// warmUp sends one request to each limited route of A that reaches its
// limit: gin tells a limiter which route a rule is on only at a request,
// so the console lists a rule with its route once the route has served
// (and every route, limited or not, from the engine's list at once).
func warmUp(t *testing.T, f *fleet) {
	t.Helper()
	user, admin := token(t, "warm", ""), token(t, "ops", app.AdminRole)
	for _, r := range []req{
		{method: http.MethodPost, target: "/api/login", body: `{"user_id":"warm"}`},
		{target: "/api/coupon/seckill"}, {target: "/api/coupon/seckill/order"},
		{target: app.ClaimPath, token: user}, {target: "/api/vouchers/7/claim", token: user},
		{target: "/api/coupon/merchant"}, {target: "/voucher-order/seckill/1"},
		{target: adminPath("warm"), token: admin}, {method: http.MethodDelete, target: adminPath("warm"), token: admin},
		{target: "/api/admin/limits/claim", token: admin},
		{method: http.MethodPut, target: "/api/admin/limits/claim", body: `{"limit": 0}`, token: admin},
	} {
		if w := serve(t, f.a, r); w.Code >= 300 {
			t.Fatalf("warm-up %s %s: %d %s", r.method, r.target, w.Code, w.Body)
		}
	}
}

// refusedBeforeSignIn: a browser that has not signed in (the first tab,
// before any sign-in has set the cookie) gets 401 and none of the
// console's content for a page, the stylesheet and the JSON API.
func refusedBeforeSignIn(t *testing.T, f *fleet, tab *browsertest.Browser) {
	for _, path := range []string{"", "console.css", "api/rules", "rule?" + url.Values{"route": {"GET " + app.ClaimPath}, "rule": {"coupon:claim"}}.Encode()} {
		resp := browsertest.Run(t, tab, chromedp.NavigateResponse(f.urlA+app.ConsolePath+path))
		if resp.Status != http.StatusUnauthorized {
			t.Errorf("%s before sign-in: %d, want 401", path, resp.Status)
		}
		if body := browsertest.Run(t, tab, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); strings.Contains(body, "coupon:claim") {
			t.Errorf("%s before sign-in shows the console's content: %.300s", path, body)
		}
	}
}

// overviewListsEveryRoute: the overview lists every route of the demo,
// and each limited route's rule with its route, the claim rule with its
// configured limit and window.
func overviewListsEveryRoute(t *testing.T, f *fleet, tab *browsertest.Browser) {
	tab.Do(t, chromedp.Navigate(f.urlA+app.ConsolePath), chromedp.WaitVisible(chromedp.CSS(claimRule)))
	for _, route := range demoRoutes(f.engineA) {
		sels := []string{`[data-app-route=` + strconv.Quote(route) + `]`}
		if rule, ok := limitedRoutes[route]; ok {
			sels = append(sels, `[data-rule=`+strconv.Quote(rule)+`][data-route=`+strconv.Quote(route)+`]`)
		}
		for _, sel := range sels {
			if !hasNode(t, tab, sel) {
				t.Errorf("the overview has no %s", sel)
			}
		}
	}
	for route := range limitedRoutes {
		if !strings.Contains(strings.Join(demoRoutes(f.engineA), "\n"), route) {
			t.Errorf("the demo has no route %s: the test's list is out of date", route)
		}
	}
	limit := browsertest.Run(t, tab, chromedp.Evaluate[string](textOf(claimRule+` [data-field="limit"]`)))
	window := browsertest.Run(t, tab, chromedp.Evaluate[string](textOf(claimRule+` [data-field="window"]`)))
	if limit != strconv.Itoa(app.ClaimLimit) || window != strconv.Itoa(int(app.ClaimWindow/time.Second)) {
		t.Errorf("the claim rule shows limit %q and window %q, want %d and %d", limit, window, app.ClaimLimit, int(app.ClaimWindow/time.Second))
	}
}

// routesServedOnAListedOnB: B, which has served none of the limited
// routes (the warm-up went to A), lists each one's rule with its route
// once A's beat and then B's have shared them (the test drives both), and
// its override form for the claim rule sets the limit A applies.
func routesServedOnAListedOnB(t *testing.T, f *fleet, tab *browsertest.Browser) {
	t.Cleanup(func() { clearClaimOverride(t, f.a) })
	for _, a := range []*app.App{f.appA, f.appB} {
		if err := a.BeatConsole(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	signIn(t, tab, f.urlB)
	for route, rule := range limitedRoutes {
		if sel := `[data-rule=` + strconv.Quote(rule) + `][data-route=` + strconv.Quote(route) + `]`; !hasNode(t, tab, sel) {
			t.Errorf("B's overview has no %s", sel)
		}
	}
	form := openRule(t, tab, f.urlB, claimRule) + ` [data-form="override"]`
	fill(t, tab, form, map[string]string{"limit": "6", "window_seconds": "60"})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if s := claimLimitOn(t, f.a, "route-check"); s.Limit == 6 && s.Source == "rule" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A does not have the claim limit B's form set, 30 s after")
		}
	}
}

// overrideReachesB: a new claim limit submitted in A's override form is in
// force on B within the second the issue states. B is polled until it
// shows the change (failing after 30 s); the latency is from the form's
// arrival at A to B's first read that shows it, A's own work included. On a loaded machine one change
// can be late for reasons that are not the console's (a starved process),
// so the change is made up to three times and the fastest must be within
// 1 s; every latency is logged.
func overrideReachesB(t *testing.T, f *fleet, tab *browsertest.Browser) {
	t.Cleanup(func() { clearClaimOverride(t, f.a) })
	var seen []time.Duration
	for i, limit := range []int{7, 8, 9} {
		form := openRule(t, tab, f.urlA, claimRule) + ` [data-form="override"]`
		f.posted.set(time.Time{})
		fill(t, tab, form, map[string]string{"limit": strconv.Itoa(limit), "window_seconds": "60"})
		var onB time.Time
		for deadline, n := time.Now().Add(30*time.Second), 0; ; n++ {
			s := claimLimitOn(t, f.b, "poller-"+strconv.Itoa(i)+"-"+strconv.Itoa(n))
			if s.Limit == limit && s.Source == "rule" {
				onB = time.Now()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B still has %+v 30 s after the form set the claim limit to %d", s, limit)
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen = append(seen, onB.Sub(f.posted.get()))
		if s := claimLimitOn(t, f.a, "checker"); s.Limit != limit || s.Source != "rule" {
			t.Fatalf("A has %+v after its form set the claim limit to %d", s, limit)
		}
		if seen[i] <= time.Second {
			break
		}
	}
	t.Logf("B applied the claim limit set in A's console form %v after the form reached A", seen)
	if slices.Min(seen) > time.Second {
		t.Errorf("B applied the change %v after the form reached A, each time more than the 1 s the console promises", seen)
	}
}

// refusedOverride: a limit the claim rule cannot take, set in the form,
// gets the rule's page again with ginlimit's reason, as SetLimit gives it
// to the admin API; nothing changes. The page answers the form at
// api/override: its stylesheet, icon and links must still load from the
// console's root, and, like every operator's tab, it must leave no error
// in the browser's console (TestConsoleInBrowser checks).
func refusedOverride(t *testing.T, f *fleet, tab *browsertest.Browser) {
	holder := openRule(t, tab, f.urlA, claimRule)
	resp := tab.Response(t, chromedp.SetValue(chromedp.CSS(holder+` [data-form="override"] [name="limit"]`), "200000"),
		chromedp.Click(chromedp.CSS(holder+` [data-form="override"] [type="submit"]`)))
	if resp.Status != http.StatusOK {
		t.Errorf("a limit of 200000: %d, want the rule's page again (200)", resp.Status)
	}
	msg := browsertest.Run(t, tab, chromedp.Evaluate[string](textOf(`[data-field="error"]`)))
	if !strings.Contains(msg, "at most 100000") {
		t.Errorf("the page says %q, want ginlimit's reason (at most 100000)", msg)
	}
	if s := claimLimitOn(t, f.a, "checker"); s.Limit != app.ClaimLimit || s.Source != "config" {
		t.Errorf("after a refused override the claim limit is %+v, want the configured one", s)
	}
	if p := tab.Problems(); len(p) != 0 {
		t.Errorf("the browser's console after the refused override: %q", p)
	}
}

// lookupFor shows the lookup of identity on the rule's page that form (the
// selector of the element holding the rule's forms) is on, and waits for
// its answer.
func lookupFor(t *testing.T, tab *browsertest.Browser, holder, identity string) {
	t.Helper()
	tab.Response(t, chromedp.SetValue(chromedp.CSS(holder+` [data-form="lookup"] [name="identity"]`), identity),
		chromedp.Click(chromedp.CSS(holder+` [data-form="lookup"] [type="submit"]`)))
	tab.Do(t, chromedp.WaitVisible(chromedp.CSS(`[data-field="remaining"]`)))
}

// lookupAndReset: a user who has made 2 of the claim rule's 3 claims (on
// B) is shown with 1 remaining by A's lookup form; reset in the console
// takes it back to 3, and B then admits her claim with 2 left.
func lookupAndReset(t *testing.T, f *fleet, tab *browsertest.Browser) {
	claim := req{target: app.ClaimPath, token: token(t, "lookup-user", "")}
	run(t, f.b, repeat(2, step{req: claim, status: http.StatusOK}))
	holder := openRule(t, tab, f.urlA, claimRule)
	lookupFor(t, tab, holder, "lookup-user")
	if got := browsertest.Run(t, tab, chromedp.Evaluate[string](textOf(`[data-field="remaining"]`))); got != "1" {
		t.Fatalf("the lookup shows %q remaining, want 1", got)
	}
	if resp := tab.Response(t, chromedp.Click(chromedp.CSS(`[data-action="reset"]`))); resp.Status != http.StatusOK {
		t.Fatalf("reset: the console answered %d", resp.Status)
	}
	lookupFor(t, tab, "body", "lookup-user")
	if got := browsertest.Run(t, tab, chromedp.Evaluate[string](textOf(`[data-field="remaining"]`))); got != strconv.Itoa(app.ClaimLimit) {
		t.Fatalf("after reset the lookup shows %q remaining, want %d", got, app.ClaimLimit)
	}
	w := run(t, f.b, []step{{req: claim, status: http.StatusOK}})[0]
	if !strings.Contains(w.Body.String(), `"remaining":2`) {
		t.Errorf("B's claim after the reset: %s, want 2 remaining", w.Body)
	}
}

// banListedAndLifted: an address that floods the merchant route on A is
// banned; A's console lists the ban on the rule's page, its lift button
// lifts it, and B then admits the address again, well within the ban's
// 60 s.
func banListedAndLifted(t *testing.T, f *fleet, tab *browsertest.Browser) {
	merchant := f.urlA + "/api/coupon/merchant"
	for deadline := time.Now().Add(30 * time.Second); ; {
		status, body := send(t, http.MethodGet, merchant, "", "")
		if status == http.StatusTooManyRequests && strings.Contains(body, app.MerchantBanMessage) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no ban within 30 s of flooding the merchant route")
		}
	}
	// The page is drawn once: the flood's refusals went through A, so its
	// console knows the ban whether or not a beat is sharing it just then.
	openRule(t, tab, f.urlA, merchantRule)
	if !hasNode(t, tab, `[data-ban]`) {
		t.Fatalf("no ban listed on the merchant rule's page:\n%s", browsertest.Run(t, tab, chromedp.OuterHTML(chromedp.CSS(`main`))))
	}
	if n := browsertest.Run(t, tab, chromedp.Evaluate[int](`document.querySelectorAll("[data-ban]").length`)); n != 1 {
		t.Fatalf("%d bans listed, want 1: the loopback address's", n)
	}
	if resp := tab.Response(t, chromedp.Click(chromedp.CSS(`[data-ban] [data-action="lift"]`))); resp.Status != http.StatusOK {
		t.Fatalf("lift: the console answered %d", resp.Status)
	}
	if hasNode(t, tab, `[data-ban]`) {
		t.Errorf("the ban is still listed after its lift")
	}
	// 4 a second, under the route's 5: this poll is never refused once the
	// window that the flood filled has passed, so it cannot ban again.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		status, body := send(t, http.MethodGet, f.urlB+"/api/coupon/merchant", "", "")
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still refuses the address 30 s after the lift: %d %s", status, body)
		}
	}
}

// hostileInputInert: markup typed into the lookup and override forms, or
// put in the console's query strings, comes back as text: no dialog
// opens, no element is injected, and the lookup shows what was typed.
// The query strings that name no rule get a 404 page, in the probe tab.
func hostileInputInert(t *testing.T, f *fleet, tab, probe *browsertest.Browser) {
	t.Cleanup(func() {
		if w := putLimit(t, f.a, `{"limit": 0, "user": `+strconv.Quote(hostile)+`}`); w.Code != http.StatusOK {
			t.Errorf("clear the hostile user's override: %d %s", w.Code, w.Body)
		}
	})
	inert := func(tab *browsertest.Browser, where string) {
		t.Helper()
		if n := browsertest.Run(t, tab, chromedp.Evaluate[int](`document.querySelectorAll("img, script, [onerror]").length`)); n != 0 {
			t.Errorf("%s: %d injected elements", where, n)
		}
		if d := tab.Dialogs(); len(d) != 0 {
			t.Fatalf("%s: dialogs opened: %q", where, d)
		}
	}
	holder := openRule(t, tab, f.urlA, claimRule)
	lookupFor(t, tab, holder, hostile)
	inert(tab, "the lookup")
	if v := browsertest.Run(t, tab, chromedp.Evaluate[string](`document.querySelector('[data-form="lookup"] [name="identity"]').value`)); v != hostile {
		t.Errorf("the lookup shows %q as typed, want %q", v, hostile)
	}
	holder = openRule(t, tab, f.urlA, claimRule)
	tab.Response(t, chromedp.SetValue(chromedp.CSS(holder+` [data-form="override"] [name="limit"]`), "5"),
		chromedp.SetValue(chromedp.CSS(holder+` [data-form="override"] [name="user"]`), hostile),
		chromedp.Click(chromedp.CSS(holder+` [data-form="override"] [type="submit"]`)))
	inert(tab, "the override's answer")
	q := url.Values{"route": {hostile}, "rule": {hostile}, "identity": {hostile}}.Encode()
	for _, page := range []string{"audit", "?" + q, "rule?" + url.Values{"route": {"GET " + app.ClaimPath}, "rule": {"coupon:claim"}, "identity": {hostile}}.Encode()} {
		tab.Do(t, chromedp.Navigate(f.urlA+app.ConsolePath+page), chromedp.WaitReady(chromedp.CSS(`body`)))
		inert(tab, page)
	}
	probe.Do(t, chromedp.Navigate(f.urlA+app.ConsolePath+"rule?"+q), chromedp.WaitReady(chromedp.CSS(`body`)))
	inert(probe, "rule?"+q)
}

// crossSitePostRefused: a page on another origin that posts the override
// form to A's console, from a browser signed in to it, is refused, and the
// claim limit stays the configured one. The forged form carries the form
// token copied from the console's own (which a real attacker cannot read),
// so that it is the same-origin check that must refuse it; once from
// another site (whose post carries no SameSite=Strict cookie), once from
// another port of the same host (whose post carries it).
func crossSitePostRefused(t *testing.T, f *fleet, tab *browsertest.Browser) {
	holder := openRule(t, tab, f.urlA, claimRule)
	form := holder + ` [data-form="override"]`
	action := browsertest.Run(t, tab, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(form)+`).action`))
	hidden := browsertest.Run(t, tab, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll(`+strconv.Quote(form+` input[type="hidden"]`)+`)].map(i => [i.name, i.value]))`))
	if !strings.HasPrefix(action, f.urlA+app.ConsolePath) || hidden["token"] == "" {
		t.Fatalf("the override form posts to %q with hidden fields %v", action, hidden)
	}
	var forged strings.Builder
	forged.WriteString(`<!doctype html><title>win a prize</title><form method="post" action="` + html.EscapeString(action) + `">`)
	for name, v := range hidden {
		forged.WriteString(`<input type="hidden" name="` + html.EscapeString(name) + `" value="` + html.EscapeString(v) + `">`)
	}
	forged.WriteString(`<input type="hidden" name="limit" value="999"><button id="go" type="submit">claim</button></form>`)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, forged.String())
	}))
	t.Cleanup(evil.Close)
	_, port, _ := strings.Cut(strings.TrimPrefix(evil.URL, "http://"), ":")
	for _, origin := range []string{"http://" + browsertest.CrossSiteHost + ":" + port, evil.URL} {
		tab.Do(t, chromedp.Navigate(origin+"/"), chromedp.WaitVisible(chromedp.ID("go")))
		resp := tab.Response(t, chromedp.Click(chromedp.ID("go")))
		if resp.Status != http.StatusForbidden && resp.Status != http.StatusUnauthorized {
			t.Errorf("a post from %s: %d, want 403 (or 401)", origin, resp.Status)
		}
		if s := claimLimitOn(t, f.a, "checker"); s.Limit != app.ClaimLimit || s.Source != "config" {
			t.Fatalf("after a post from %s the claim limit is %+v, want the configured %d", origin, s, app.ClaimLimit)
		}
	}
}

// consoleShots, when set, is the directory TestConsoleScreenshots writes
// the console's pictures to (the demo's README shows them):
//
//	go test -run TestConsoleScreenshots ./example/coupon/app -console-shots ..
var consoleShots = flag.String("console-shots", "", "write console.png and console-rule.png, screenshots of the console, to this directory")

// TestConsoleScreenshots takes the README's screenshots of the console,
// after half a minute of traffic on two instances: claims of a few users,
// some refused, and a flood of merchant queries that ends in a ban. It
// runs only with -console-shots.
func TestConsoleScreenshots(t *testing.T) {
	if *consoleShots == "" {
		t.Skip("takes screenshots only with -console-shots DIR")
	}
	f := startFleet(t)
	warmUp(t, f)
	users := []string{"alice", "bob", "carol", "dave", "erin"}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		for i, u := range users[:1+int(time.Now().Unix())%len(users)] {
			h := []http.Handler{f.a, f.b}[i%2]
			serve(t, h, req{target: app.ClaimPath, token: token(t, u, "")})
			serve(t, h, req{target: "/api/coupon/seckill"})
		}
		for range 3 {
			send(t, http.MethodGet, f.urlA+"/api/coupon/merchant", "", "")
		}
	}
	br := browsertest.Start(t)
	tab := br.Tab(t)
	signIn(t, tab, f.urlA)
	tab.Do(t, chromedp.EmulateViewport(1280, 900))
	shoot := func(name string) {
		png := browsertest.Run(t, tab, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(*consoleShots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tab.Do(t, chromedp.Navigate(f.urlA+app.ConsolePath), chromedp.WaitVisible(chromedp.CSS(claimRule)))
	shoot("console.png")
	openRule(t, tab, f.urlA, claimRule)
	lookupFor(t, tab, "body", "alice")
	shoot("console-rule.png")
}
