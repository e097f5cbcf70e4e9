package problem_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/ginlimit/problem"
)

func init() { gin.SetMode(gin.TestMode) }

// problemSchema is a JSON Schema of the problem details of RFC 9457
// (section 3) with the member the RateLimit draft's problem types define,
// violated-policies, as a 429 of ginlimit must carry them.
const problemSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["type", "title", "status", "detail", "violated-policies"],
  "properties": {
    "type": {"type": "string", "format": "uri",
      "enum": ["https://iana.org/assignments/http-problem-types#quota-exceeded",
               "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"]},
    "title": {"type": "string", "minLength": 1},
    "status": {"type": "integer", "const": 429},
    "detail": {"type": "string", "minLength": 1},
    "instance": {"type": "string", "format": "uri-reference"},
    "violated-policies": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
  }
}`

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(problemSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("problem.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("problem.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// route serves GET /x limited by opts on a fresh miniredis.
func route(t *testing.T, opts ...ginlimit.Option) *gin.Engine {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := ginlimit.New(ginlimit.Redis(c), ginlimit.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	e.GET("/x", l.RateLimit(opts...), func(c *gin.Context) { c.Status(http.StatusOK) })
	return e
}

func get(e *gin.Engine) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.RemoteAddr = "192.0.2.1:1"
	e.ServeHTTP(w, r)
	return w
}

// checkProblem validates w's body against the schema and returns it.
func checkProblem(t *testing.T, s *jsonschema.Schema, w *httptest.ResponseRecorder) problem.Details {
	t.Helper()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q, want 429 application/problem+json", w.Code, w.Header().Get("Content-Type"))
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(w.Body.Bytes()))
	if err != nil {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	if err := s.Validate(v); err != nil {
		t.Fatalf("body %s does not follow the schema: %v", w.Body, err)
	}
	var p problem.Details
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") == "" {
		t.Fatalf("headers %v: want Retry-After and RateLimit beside the problem", w.Header())
	}
	return p
}

// TestRespond: with problem.Respond a 429 is problem+json following the
// schema: quota-exceeded with the route's message as detail and the rules
// that refused as violated-policies, abnormal-usage-detected with the
// ban's message for a banned client; without it, the default body stays.
func TestRespond(t *testing.T) {
	t.Parallel()
	s := compileSchema(t)

	e := route(t, ginlimit.Key("one:"), ginlimit.Limit(1), ginlimit.Type(ginlimit.IP),
		ginlimit.Message("Slow down"), ginlimit.Respond(problem.Respond))
	get(e)
	p := checkProblem(t, s, get(e))
	if p.Type != problem.QuotaExceeded || p.Title != "Quota Exceeded" || p.Detail != "Slow down" ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "one" {
		t.Fatalf("%+v: want quota-exceeded, detail Slow down, violated [one]", p)
	}

	// Redis's refusal (no deny cache) and the deny cache's name the same
	// rule: the one that refused, not every rule of the refused request.
	for _, cache := range []int{0, ginlimit.DefaultDenyCacheSize} {
		e = route(t, ginlimit.Respond(problem.Respond), ginlimit.DenyCache(cache),
			ginlimit.Rule(ginlimit.Name("burst"), ginlimit.Key("b:"), ginlimit.Limit(1), ginlimit.Message("Too fast")),
			ginlimit.Rule(ginlimit.Name("hourly"), ginlimit.Key("h:"), ginlimit.Limit(100)))
		get(e)
		p = checkProblem(t, s, get(e))
		if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "burst" || p.Detail != "Too fast" {
			t.Fatalf("DenyCache(%v): %+v: want only the rule that refused, burst, with its message", cache, p)
		}
	}

	e = route(t, ginlimit.Key("ban:"), ginlimit.Limit(1), ginlimit.Type(ginlimit.IP),
		ginlimit.Ban(2, time.Minute, time.Hour), ginlimit.DenyCache(0), ginlimit.Respond(problem.Respond))
	for range 3 {
		get(e)
	}
	p = checkProblem(t, s, get(e))
	if p.Type != problem.AbnormalUsageDetected || p.Title != "Abnormal Usage Detected" || p.Detail != ginlimit.DefaultBanMessage {
		t.Fatalf("%+v: want abnormal-usage-detected with the ban's message", p)
	}

	e = route(t, ginlimit.Key("plain:"), ginlimit.Limit(1))
	get(e)
	w := get(e)
	if w.Code != http.StatusTooManyRequests || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") ||
		!strings.HasPrefix(w.Body.String(), `{"code":429,"message":`) {
		t.Fatalf("without problem.Respond: %d %q %s, want ginlimit's default JSON body", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}

// TestRespondInFlight: a refusal by an in-flight rule is quota-exceeded
// too, naming that rule.
func TestRespondInFlight(t *testing.T) {
	t.Parallel()
	d := ginlimit.Decision{Rule: "slots", Message: "Busy", Rules: []ginlimit.Decision{{Rule: "a", Allowed: true}, {Rule: "slots"}}}
	p := problem.For(d)
	if p.Type != problem.QuotaExceeded || p.Detail != "Busy" || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "slots" {
		t.Fatalf("%+v", p)
	}
}
