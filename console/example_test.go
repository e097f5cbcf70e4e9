package console_test

import (
	"log"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ginlimit/ginlimit/console"
	"github.com/ginlimit/ginlimit/ginlimit"
)

// The console sees every route's decisions through an Observer given to
// the Limiter, and answers only those Authorize lets in.
func ExampleMountWith() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	obs := console.NewObserver()
	limiter, err := ginlimit.New(ginlimit.Redis(rdb), obs.Option())
	if err != nil {
		log.Fatal(err)
	}
	engine := gin.New()
	engine.GET("/api/search", limiter.RateLimit(ginlimit.Limit(100), ginlimit.Per(ginlimit.IP)), func(c *gin.Context) {})
	admin := engine.Group("/console")
	con, err := console.MountWith(admin, console.Config{
		Limiter: limiter, Redis: rdb, Routes: engine.Routes,
		Authorize: func(c *gin.Context) (string, bool) {
			return "ops", c.GetHeader("Authorization") == "Bearer "+"change-me"
		},
	}, obs)
	if err != nil {
		log.Fatal(err)
	}
	defer con.Close()
	_ = engine.Run(":8080")
}
