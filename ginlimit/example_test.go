package ginlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

// The design card's annotation: the package-level RateLimit takes the
// limiter among its options, and compiles the route when it is called.
func ExampleRateLimit() {
	mr := miniredis.NewMiniRedis() // stands in for a real Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// miniredis runs the scripts in this process, slowly under -race on a
	// busy machine; a Redis of its own answers well within DefaultTimeout.
	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/voucher-order/seckill/:id", ginlimit.RateLimit(limiter,
		ginlimit.Key("voucher:seckill:"), ginlimit.Window(10*time.Second), ginlimit.Limit(2),
		ginlimit.Message("Seckill is too popular, please try again later"),
		ginlimit.Type(ginlimit.Method)),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	for _, id := range []string{"1", "2", "3"} { // one bucket per route template
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/voucher-order/seckill/"+id, nil))
		fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Body.String())
	}
	// Output:
	// 200 1 ok
	// 200 0 ok
	// 429 0 {"code":429,"message":"Seckill is too popular, please try again later"}
}

func ExamplePolicy_Allow() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // the Redis clock decides
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	policy, err := limiter.Policy(ginlimit.Key("export:"), ginlimit.Window(250*time.Millisecond), ginlimit.Limit(1))
	if err != nil {
		panic(err)
	}
	for range 2 {
		d, err := policy.Allow(context.Background(), "tenant-42", 1)
		if err != nil {
			panic(err)
		}
		// The second is refused: the first admission used the last of
		// the quota. Once the limiter's reset subscription is up, such a
		// refusal comes from the in-process deny cache (d.Cached), with
		// no call to Redis.
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter > 0 && d.RetryAfter <= 250*time.Millisecond)
	}
	// The Redis keys the rule wrote. ginlimit.InstancesKey, where the
	// limiters count each other, is left out: a heartbeat in the background
	// writes it, and whether it has yet is a matter of timing.
	fmt.Println(slices.DeleteFunc(mr.Keys(), func(k string) bool { return k == ginlimit.InstancesKey }))
	// Output:
	// true 0 false
	// false 0 true
	// [export:sl2:{tenant-42}]
}

func ExampleDecisionFrom() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/report", limiter.RateLimit(ginlimit.Name("reports"), ginlimit.Limit(5)),
		func(c *gin.Context) {
			d, _ := ginlimit.DecisionFrom(c)
			c.JSON(http.StatusOK, gin.H{"rule": d.Rule, "remaining": d.Remaining})
		})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/report", nil))
	fmt.Println(w.Body.String())
	// Output:
	// {"remaining":4,"rule":"reports"}
}

func ExampleNew() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	jwt, err := identity.NewJWT(identity.HMACSecret([]byte("an-hs256-secret-of-at-least-32-bytes")))
	if err != nil {
		panic(err)
	}
	ips, err := identity.NewIP("10.0.0.0/8") // X-Forwarded-For is honoured from these proxies only
	if err != nil {
		panic(err)
	}
	_, err = ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.UserIdentity(jwt), ginlimit.IPIdentity(ips),
		ginlimit.OnFailure(ginlimit.FailClosed))
	fmt.Println(err)

	_, err = ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.Limit(0))
	fmt.Println(err)
	// Output:
	// <nil>
	// ginlimit.New: Limit(0): the limit must be between 1 and 1e9
}

func ExampleRule() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/search", limiter.RateLimit(ginlimit.Key("search:"),
		ginlimit.Rule(ginlimit.Name("burst"), ginlimit.Window(time.Second), ginlimit.Limit(2)),
		ginlimit.Rule(ginlimit.Name("daily"), ginlimit.Window(24*time.Hour), ginlimit.Limit(100), ginlimit.Algorithm(ginlimit.FixedWindow))),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/search", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Body.String())
	}
	// Output:
	// 200 "burst";q=2;w=1, "daily";q=100;w=86400 ok
	// 200 "burst";q=2;w=1, "daily";q=100;w=86400 ok
	// 429 "burst";q=2;w=1, "daily";q=100;w=86400 {"code":429,"message":"Too many requests, please try again later","rule":"burst"}
}

func ExampleAlgorithm() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	// 10 per minute sustained, bursts of up to 3, batch requests costing 2.
	bucket, err := limiter.Policy(ginlimit.Key("export:"), ginlimit.Algorithm(ginlimit.TokenBucket),
		ginlimit.Window(time.Minute), ginlimit.Limit(10), ginlimit.Burst(3))
	if err != nil {
		panic(err)
	}
	for _, cost := range []int{2, 2, 5} {
		d, err := bucket.Allow(context.Background(), "tenant-7", cost)
		if err != nil {
			panic(err)
		}
		fmt.Printf("cost %d: allowed %v, %d left %q\n", cost, d.Allowed, d.Remaining, d.Reason)
	}
	// Output:
	// cost 2: allowed true, 1 left ""
	// cost 2: allowed false, 1 left ""
	// cost 5: allowed false, 0 left "the request costs 5, more than the rule can ever admit (3)"
}

// The recommended form: the annotation bound to its limiter needs no
// middleware, and a misconfigured route panics at start-up.
func ExampleLimiter_RateLimit() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	// The Redis clock decides; on a whole millisecond, the sliding log's
	// unit, the reset is the window exactly.
	mr.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.Type(ginlimit.IP))
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/api/coupon/merchant", limiter.RateLimit(ginlimit.Key("coupon:merchant:"), ginlimit.Limit(1)),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/api/coupon/merchant", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// The Redis keys the rule wrote. ginlimit.InstancesKey, where the
	// limiters count each other, is left out: a heartbeat in the background
	// writes it, and whether it has yet is a matter of timing.
	fmt.Println(slices.DeleteFunc(mr.Keys(), func(k string) bool { return k == ginlimit.InstancesKey }))
	// Output:
	// 200 "coupon:merchant";r=0;t=10
	// 429 "coupon:merchant";r=0;t=10
	// [coupon:merchant:sl2:{POST /api/coupon/merchant ip:192.0.2.1}]
}

func ExamplePolicy_Peek() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.UserIdentity(identity.FromContext("user")))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	// The route and the Policy get the same options: the same rule, the
	// same counts.
	claim := []ginlimit.Option{ginlimit.Key("coupon:claim:"), ginlimit.Window(time.Minute),
		ginlimit.Limit(3), ginlimit.Type(ginlimit.User)}
	claimLimit, err := limiter.Policy(claim...)
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/api/coupon/claim", func(c *gin.Context) { c.Set("user", c.Query("user")) },
		limiter.RateLimit(claim...), func(c *gin.Context) { c.String(http.StatusOK, "claimed") })
	for range 2 {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/api/coupon/claim?user=alice", nil))
	}

	// The count is named by route, rule and user, never by its Redis key.
	d, err := claimLimit.Peek(context.Background(), ginlimit.Target{Route: "GET /api/coupon/claim", User: "alice"})
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Allowed, d.Remaining, d.Limit)
	// Output:
	// true 1 3
}

func ExamplePolicy_Reset() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	exports, err := limiter.Policy(ginlimit.Key("export:"), ginlimit.Window(time.Hour), ginlimit.Limit(1))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 2 {
		d, _ := exports.Allow(ctx, "tenant-42", 1)
		fmt.Println(d.Allowed)
	}
	// Support lifts the tenant's limit: every instance forgets its cached
	// refusal before Reset returns.
	if err := exports.Reset(ctx, ginlimit.Target{Key: "tenant-42"}, "support"); err != nil {
		panic(err)
	}
	d, _ := exports.Allow(ctx, "tenant-42", 1)
	fmt.Println(d.Allowed)
	// Output:
	// true
	// false
	// true
}

func ExamplePolicy_SetLimit() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	exports, err := limiter.Policy(ginlimit.Key("export:"), ginlimit.Window(time.Minute), ginlimit.Limit(100))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// This tenant bought 10,000 a minute: every instance applies it within
	// half a second, this one before SetLimit returns.
	if err := exports.SetLimit(ctx, ginlimit.Target{Key: "tenant-42"}, 10_000, 0); err != nil {
		panic(err)
	}
	d, _ := exports.Allow(ctx, "tenant-42", 1)
	fmt.Println(d.Limit, d.Window, d.Source == ginlimit.SourceIdentityOverride)
	d, _ = exports.Allow(ctx, "tenant-7", 1)
	fmt.Println(d.Limit, d.Window, d.Source == ginlimit.SourceConfig)
	// What the scripts would refuse is refused now, with start-up's reason.
	err = exports.SetLimit(ctx, ginlimit.Target{Route: "Policy.Allow"}, 200_000, 0)
	fmt.Println(errors.Is(err, ginlimit.ErrBadLimit))
	// Output:
	// 10000 1m0s true
	// 100 1m0s true
	// true
}

func ExampleBan() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	// 1 per minute; 2 refusals within a minute ban the caller for an hour.
	// The deny cache is off here so that every refusal reaches Redis at
	// once; with it, the refusals it answers reach Redis with the next call
	// on the key, within DefaultMaxStaleness.
	login, err := limiter.Policy(ginlimit.Key("login:"), ginlimit.Window(time.Minute), ginlimit.Limit(1),
		ginlimit.Ban(2, time.Minute, time.Hour), ginlimit.DenyCache(0))
	if err != nil {
		panic(err)
	}
	for range 4 {
		d, _ := login.Allow(context.Background(), "ip:192.0.2.7", 1)
		fmt.Println(d.Allowed, d.Banned, d.RetryAfter.Round(time.Minute))
	}
	// Output:
	// true false 0s
	// false false 1m0s
	// false true 1h0m0s
	// false true 1h0m0s
}

func ExamplePer() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.UserIdentity(identity.FromContext("user")))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// One claim per user per voucher per day.
	r.GET("/api/vouchers/:id/claim", func(c *gin.Context) { c.Set("user", c.Query("user")) },
		limiter.RateLimit(ginlimit.Key("voucher:claim:"), ginlimit.Window(24*time.Hour), ginlimit.Limit(1),
			ginlimit.Per(ginlimit.User, ginlimit.ByParam("id"))),
		func(c *gin.Context) { c.String(http.StatusOK, "claimed") })
	for _, path := range []string{"/api/vouchers/7/claim?user=alice", "/api/vouchers/7/claim?user=alice", "/api/vouchers/8/claim?user=alice"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(w.Code)
	}
	// The Redis keys the rule wrote. ginlimit.InstancesKey, where the
	// limiters count each other, is left out: a heartbeat in the background
	// writes it, and whether it has yet is a matter of timing.
	fmt.Println(slices.DeleteFunc(mr.Keys(), func(k string) bool { return k == ginlimit.InstancesKey }))
	// Output:
	// 200
	// 429
	// 200
	// [voucher:claim:sl2:{GET /api/vouchers/:id/claim user:alice p.id:7} voucher:claim:sl2:{GET /api/vouchers/:id/claim user:alice p.id:8}]
}

func ExampleLimitBy() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// 1 per minute, or the limit of the plan the request names (here a
	// header; in practice what your authentication set).
	r.GET("/api/search", limiter.RateLimit(ginlimit.Key("search:"), ginlimit.Window(time.Minute), ginlimit.Limit(1),
		ginlimit.Type(ginlimit.IP),
		ginlimit.LimitBy(func(c *gin.Context) string { return c.GetHeader("X-Plan") },
			map[string]int{"team": 3})),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for _, plan := range []string{"", "", "team", "team", "team", "team"} {
		req := httptest.NewRequest(http.MethodGet, "/api/search", nil)
		req.Header.Set("X-Plan", plan)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(plan, w.Code, w.Header().Get("X-RateLimit-Limit"))
	}
	// Output:
	//  200 1
	//  429 1
	// team 200 3
	// team 200 3
	// team 200 3
	// team 429 3
}

func ExampleInFlight() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	get := func(path string) {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	// At most 100 orders per second, and at most 1 being written at once
	// over every instance.
	r.GET("/order", limiter.RateLimit(ginlimit.Key("coupon:order:"),
		ginlimit.Rule(ginlimit.Name("rate"), ginlimit.Window(time.Second), ginlimit.Limit(100)),
		ginlimit.Rule(ginlimit.Name("orders"), ginlimit.InFlight(1, 30*time.Second))),
		func(c *gin.Context) {
			if c.Query("from") == "" {
				get("/order?from=inside") // another order while this one holds the slot
			}
			c.String(http.StatusOK, "ordered")
		})

	get("/order")
	get("/order?from=outside") // the slot was given back when the first returned
	// Output:
	// /order?from=inside 429 1 {"code":429,"message":"Too many requests, please try again later","rule":"orders"}
	// /order 200  ordered
	// /order?from=outside 200  ordered
}

func ExampleType() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.UserIdentity(identity.FromContext("user")))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// 1 per minute per user; callers without an identity count per IP, in
	// buckets of their own, instead of being answered 401.
	r.GET("/api/feed", func(c *gin.Context) {
		if u := c.Query("user"); u != "" {
			c.Set("user", u)
		}
	}, limiter.RateLimit(ginlimit.Key("feed:"), ginlimit.Window(time.Minute), ginlimit.Limit(1),
		ginlimit.Type(ginlimit.UserOrIP)),
		func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for _, path := range []string{"/api/feed?user=alice", "/api/feed?user=alice", "/api/feed", "/api/feed"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(path, w.Code)
	}
	// The Redis keys the rule wrote. ginlimit.InstancesKey, where the
	// limiters count each other, is left out: a heartbeat in the background
	// writes it, and whether it has yet is a matter of timing.
	fmt.Println(slices.DeleteFunc(mr.Keys(), func(k string) bool { return k == ginlimit.InstancesKey }))
	// Output:
	// /api/feed?user=alice 200
	// /api/feed?user=alice 429
	// /api/feed 200
	// /api/feed 429
	// [feed:sl2:{GET /api/feed anon:192.0.2.1} feed:sl2:{GET /api/feed user:alice}]
}

func ExampleObserve() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// Every decision, refusal and Redis error arrives here with its
	// outcome; the metrics package's collector.Observe fits the same way.
	seen := map[ginlimit.Outcome]int{}
	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second), ginlimit.Observe(func(_ context.Context, e ginlimit.Event) {
		seen[e.Outcome]++
	}))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	exports, err := limiter.Policy(ginlimit.Key("export:"), ginlimit.Limit(1), ginlimit.DenyCache(0))
	if err != nil {
		panic(err)
	}
	for range 3 {
		_, _ = exports.Allow(context.Background(), "tenant-42", 1)
	}
	fmt.Println(seen[ginlimit.OutcomeAllowed], seen[ginlimit.OutcomeLimited])
	// Output:
	// 1 2
}

// One budget for a group of routes: Per(Shared) takes the route out of
// the key, so every route that carries the rule draws on one count; with
// ByHeader beside it, one count per API key across the group.
func ExamplePer_shared() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	limiter, err := ginlimit.New(ginlimit.Redis(rdb), ginlimit.Timeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	api := r.Group("/api")
	api.Use(limiter.RateLimit(ginlimit.Key("api:"), ginlimit.Window(time.Minute), ginlimit.Limit(3),
		ginlimit.Per(ginlimit.Shared, ginlimit.ByHeader("X-API-Key"))))
	api.GET("/orders", func(c *gin.Context) { c.String(http.StatusOK, "orders") })
	api.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "created") })

	for _, call := range []struct{ method, key string }{
		{http.MethodGet, "k1"}, {http.MethodPost, "k1"}, {http.MethodGet, "k1"},
		{http.MethodPost, "k1"}, // the fourth of k1 on the group: refused
		{http.MethodPost, "k2"}, // another key has its own budget
	} {
		req := httptest.NewRequest(call.method, "/api/orders", nil)
		req.Header.Set("X-API-Key", call.key)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(call.method, call.key, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// GET k1 200 2
	// POST k1 201 1
	// GET k1 200 0
	// POST k1 429 0
	// POST k2 201 2
}
