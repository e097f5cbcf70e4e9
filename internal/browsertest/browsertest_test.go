package browsertest_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ginlimit/ginlimit/internal/browsertest"
)

// TestBrowserRecordsProblemsAndDialogs: a page that writes console.error,
// throws, fails to load an image and opens an alert has each recorded, the
// alert is dismissed so that the page goes on, and a second tab starts
// with records of its own.
func TestBrowserRecordsProblemsAndDialogs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(`<!doctype html><title>t</title>
<img src="/missing.png">
<script>
console.error("boom-console");
alert("boom-alert");
document.body.dataset.after = "alert";
setTimeout(function () { throw new Error("boom-throw"); }, 0);
</script>`))
		case "/quiet":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(`<!doctype html><title>quiet</title><p id="p">ok</p>`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	b := browsertest.Start(t)
	b.Do(t, chromedp.Navigate(srv.URL+"/"), chromedp.WaitReady(chromedp.CSS(`body[data-after="alert"]`)))
	if got := b.Dialogs(); !slices.Equal(got, []string{"alert: boom-alert"}) {
		t.Errorf("dialogs %q, want the one alert", got)
	}
	// The exception and the image's 404 come asynchronously: wait for them
	// with the tab's own deadline rather than a timer.
	want := []string{"boom-console", "boom-throw", "404"}
	for _, w := range want {
		waitProblem(t, b, w)
	}

	t.Logf("problems %q", b.Problems())
	quiet := b.Tab(t)
	quiet.Do(t, chromedp.Navigate(srv.URL+"/quiet"), chromedp.WaitVisible(chromedp.ID("p")))
	if text := browsertest.Run(t, quiet, chromedp.Text(chromedp.ID("p"))); text != "ok" {
		t.Errorf("text %q, want ok", text)
	}
	if p, d := quiet.Problems(), quiet.Dialogs(); len(p) != 0 || len(d) != 0 {
		t.Errorf("a quiet page in a second tab: problems %q, dialogs %q; want none", p, d)
	}
}

// waitProblem waits until one of b's problems holds s, within the tab's
// action deadline, polling the page so that a broken browser fails rather
// than hangs.
func waitProblem(t *testing.T, b *browsertest.Browser, s string) {
	t.Helper()
	for range 600 {
		if slices.ContainsFunc(b.Problems(), func(p string) bool { return strings.Contains(p, s) }) {
			return
		}
		b.Do(t, chromedp.Sleep(100*time.Millisecond)) // in the tab: fails if the browser died
	}
	t.Fatalf("no problem mentions %q within 60 s; problems %q", s, b.Problems())
}
