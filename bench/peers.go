package main

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// The peer libraries, each used the way its README shows, on a client from
// newClient. Both take a go-redis v9 client: redis_rate v10 is built against
// v9, and so is ulule/limiter v3's Redis store since v3.11.

// newRedisRate returns redis_rate's GCRA with a burst of limit, refilled at
// limit per window. Allowed means Result.Allowed > 0.
func newRedisRate(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
	l := redis_rate.NewLimiter(rdb)
	lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: window}
	return func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, key, lim)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, nil
}

// ululePrefix is the key prefix of ulule's store; its keys are prefix:key.
const ululePrefix = "ulule"

// newUlule returns ulule/limiter's fixed window on its Redis store. Allowed
// means the returned context has not Reached the limit.
func newUlule(rdb *redis.Client, limit int, window time.Duration) (decider, error) {
	store, err := ululeredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: ululePrefix})
	if err != nil {
		return nil, err
	}
	l := limiter.New(store, limiter.Rate{Period: window, Limit: int64(limit)})
	return func(ctx context.Context, key string) (bool, error) {
		c, err := l.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !c.Reached, nil
	}, nil
}
