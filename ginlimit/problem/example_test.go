package problem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/ginlimit/problem"
)

// A route whose 429 is RFC 9457 problem+json, with the draft's
// quota-exceeded type and the route's message as detail.
func ExampleRespond() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	// miniredis runs the scripts in this process, slowly under -race on a
	// busy machine; a Redis of its own answers well within DefaultTimeout.
	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/api/export", limiter.RateLimit(
		ginlimit.Key("export:"), ginlimit.Limit(1),
		ginlimit.Message("One export at a time, please"),
		ginlimit.Respond(problem.Respond)),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/export", nil))
		fmt.Println(w.Code, w.Header().Get("Content-Type"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Println(w.Body.String())
		}
	}
	// Output:
	// 200 text/plain; charset=utf-8
	// 429 application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"One export at a time, please","violated-policies":["export"]}
}
