package main

import _ "embed"

// The Lua of the cases that are not ginlimit's (ginlimit's own scripts are
// in ../lua): kept in bench/lua so that no Go file holds Lua.
var (
	//go:embed lua/noop.lua
	noopLua string
	//go:embed lua/log_floor.lua
	logFloorSource string
	// seedsSource is the recipe's Lua, as published.
	//go:embed lua/seeds.lua
	seedsSource string
	// redisClockLua is the one line of the seeds' recipe that differs on
	// the Redis clock (seedsOnRedisTimeScript).
	//go:embed lua/redis_clock.lua
	redisClockLua string
)
