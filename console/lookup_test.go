package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// TestLookupIsAPost: the lookup form posts the identity, with the form
// token like every other post; an identity in a URL looks nothing up,
// and no answer sends it back in a URL.
func TestLookupIsAPost(t *testing.T) {
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), nil)
	in.claim("alice")
	rule := url.Values{"route": {claimRoute}, "rule": {"claim"}}
	page := in.get("/console/rule?"+rule.Encode(), false).Body.String()
	if !strings.Contains(page, `<form data-form="lookup" method="post" action="rule">`) {
		t.Errorf("the lookup form is not a post to rule: %s", page)
	}
	if page := in.get("/console/rule?"+rule.Encode()+"&identity=alice", false).Body.String(); strings.Contains(page, `data-field="remaining"`) {
		t.Errorf("an identity in the URL was looked up: %s", page)
	}
	if w := in.get("/console/api/lookup?"+rule.Encode()+"&identity=alice", false); w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /console/api/lookup: %d %s", w.Code, w.Body.String())
	}
	form := url.Values{"route": {claimRoute}, "rule": {"claim"}, "identity": {"alice"}}
	if page := in.post("/console/rule", form).Body.String(); !strings.Contains(page, `data-field="remaining">1<`) {
		t.Errorf("the lookup of alice: %s", page)
	}
	var res lookupResult
	if w := in.post("/console/api/lookup", form); json.Unmarshal(w.Body.Bytes(), &res) != nil || res.Remaining != 1 {
		t.Errorf("POST /console/api/lookup: %d %s", w.Code, w.Body.String())
	}
	for name, hdr := range map[string][]string{"cross-site": {"Sec-Fetch-Site", "cross-site"}, "cookie, no token": {"Cookie", "session=x"}} {
		for _, p := range []string{"/console/rule", "/console/api/lookup"} {
			if w := in.post(p, form, hdr...); w.Code != http.StatusForbidden {
				t.Errorf("%s lookup at %s: %d", name, p, w.Code)
			}
		}
	}
	form.Set("token", in.console.token("tester"))
	if w := in.post("/console/rule", form, "Cookie", "session=x", "Sec-Fetch-Site", "same-origin"); !strings.Contains(w.Body.String(), `data-field="remaining">1<`) {
		t.Errorf("a lookup with its token: %d %s", w.Code, w.Body.String())
	}
	if w := in.post("/console/api/reset", form); w.Code != http.StatusSeeOther || strings.Contains(w.Header().Get("Location"), "alice") {
		t.Errorf("reset: %d, back to %q: the identity must stay out of URLs", w.Code, w.Header().Get("Location"))
	}
}

// TestRefusedFormLinksFromRoot: the rule's page that answers a refused
// form at api/override links to the stylesheet, the icon, the pages and
// the forms from the console's root, and a browser gets it as a 200.
func TestRefusedFormLinksFromRoot(t *testing.T) {
	srv := redistest.Start(t)
	in := newInstance(t, srv.Client(), nil)
	in.claim("alice")
	form := url.Values{"route": {claimRoute}, "rule": {"claim"}, "limit": {"200000"}}
	w := in.post("/console/api/override", form, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Site", "same-origin")
	page := w.Body.String()
	if w.Code != http.StatusOK || !strings.Contains(page, `data-field="error"`) {
		t.Fatalf("a refused override in a browser: %d %s", w.Code, page)
	}
	for _, ref := range []string{`href="../console.css"`, `href="../favicon.svg"`, `href="../audit"`, `href="../"`,
		`action="../api/override"`, `action="../rule"`} {
		if !strings.Contains(page, ref) {
			t.Errorf("the page has no %s: %s", ref, page)
		}
	}
	if w := in.post("/console/api/override", form); w.Code != http.StatusBadRequest {
		t.Errorf("a refused override from a script: %d, want 400", w.Code)
	}
}
