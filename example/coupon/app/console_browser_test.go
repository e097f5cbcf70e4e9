package app_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	urlA, urlB string
	// posted is when A last finished answering a POST to the console.
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
	f := &fleet{a: newApp(t, cfg), b: newApp(t, cfg)}
	f.engineA = f.a.(*gin.Engine)
	sa := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.a.ServeHTTP(w, r)
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, app.ConsolePath) {
			f.posted.set(time.Now())
		}
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

// waitJS waits until expr is true in the tab's page, failing t after 30 s.
// A page that is loading (a form's answer) is waited for too.
func waitJS(t *testing.T, tab *browsertest.Browser, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := browsertest.Try(tab, chromedp.Evaluate[bool](`(() => { try { return !!(`+expr+`) } catch (e) { return false } })()`))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within 30 s (%s); last error %v", what, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// get sends a GET to rawURL with header (name, value) when name is not
// empty, and returns the status and body.
func get(t *testing.T, rawURL, name, value string) (int, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		r.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	return resp.StatusCode, string(body)
}
