package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// memoryWindow is the window of the memory cases: long enough that nothing
// leaves it while a key is filled.
const memoryWindow = 60 * time.Second

// memoryResult is the Redis memory of one full key.
type memoryResult struct {
	Case     *benchCase
	Limit    int
	Admitted int64
	Bytes    int64  // MEMORY USAGE key SAMPLES 0
	Encoding string // OBJECT ENCODING key
	Type     string // TYPE key
	Fields   int64  // HLEN key, for a hash
	Key      string // the Redis key
}

// PerEntry returns the bytes per admitted request.
func (m memoryResult) PerEntry() float64 { return float64(m.Bytes) / float64(max(1, m.Admitted)) }

// measureMemory sends exactly limit requests, one after another, to one
// fresh key of case c with a limit of limit per memoryWindow, so the key is
// full, and reads MEMORY USAGE of the key with SAMPLES 0 (every element
// counted, not sampled), through admin, on the server at addr.
func measureMemory(ctx context.Context, admin *redis.Client, addr string, c *benchCase, limit int) (memoryResult, error) {
	if err := admin.FlushDB(ctx).Err(); err != nil {
		return memoryResult{}, fmt.Errorf("FLUSHDB: %w", err)
	}
	rdb := c.Client.newClient(addr)
	defer rdb.Close()
	d, err := c.New(rdb, limit, memoryWindow)
	if err != nil {
		return memoryResult{}, err
	}
	key := "mem:" + strconv.Itoa(limit)
	res := memoryResult{Case: c, Limit: limit}
	for range limit {
		ok, err := d(ctx, key)
		if err != nil {
			return memoryResult{}, err
		}
		if ok {
			res.Admitted++
		}
	}
	// The database was emptied, so the case's pattern matches its one key.
	pattern := c.RedisKey(key)
	found, err := admin.Keys(ctx, pattern).Result()
	if err != nil {
		return memoryResult{}, fmt.Errorf("KEYS %s: %w", pattern, err)
	}
	if len(found) != 1 {
		return memoryResult{}, fmt.Errorf("KEYS %s: %q, want one key", pattern, found)
	}
	rkey := found[0]
	res.Key = rkey
	if res.Bytes, err = admin.MemoryUsage(ctx, rkey, 0).Result(); err != nil {
		return memoryResult{}, fmt.Errorf("MEMORY USAGE %s SAMPLES 0: %w", rkey, err)
	}
	if res.Encoding, err = admin.ObjectEncoding(ctx, rkey).Result(); err != nil {
		return memoryResult{}, fmt.Errorf("OBJECT ENCODING %s: %w", rkey, err)
	}
	if res.Type, err = admin.Type(ctx, rkey).Result(); err != nil {
		return memoryResult{}, fmt.Errorf("TYPE %s: %w", rkey, err)
	}
	if res.Type == "hash" {
		if res.Fields, err = admin.HLen(ctx, rkey).Result(); err != nil {
			return memoryResult{}, fmt.Errorf("HLEN %s: %w", rkey, err)
		}
	}
	return res, nil
}
