package console

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/internal/redistest"
)

// BenchmarkOverview100Routes renders the overview of an application with
// 100 limited routes, each of which has served a request, on a real
// redis-server (the page counts the live instances there).
func BenchmarkOverview100Routes(b *testing.B) {
	srv := redistest.Start(b)
	l, err := ginlimit.New(ginlimit.Redis(srv.Client()), ginlimit.Timeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	e := gin.New()
	for i := range 100 {
		e.GET("/r/"+strconv.Itoa(i)+"/:id", l.RateLimit(ginlimit.Key("bench:"+strconv.Itoa(i)+":"), ginlimit.Limit(100), ginlimit.Per(ginlimit.IP)), func(c *gin.Context) {})
	}
	con, err := withPeriod(e.Group("/console"), Config{Limiter: l, Redis: srv.Client(), Routes: e.Routes,
		Authorize: func(*gin.Context) (string, bool) { return "bench", true }}, NewObserver(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = con.Close() })
	for i := range 100 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/r/"+strconv.Itoa(i)+"/1", nil))
	}
	if n := len(l.Rules()); n != 100 {
		b.Fatalf("%d rules", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/", nil))
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
