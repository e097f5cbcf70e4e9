// Package lua holds the Redis Lua scripts that ginlimit runs, embedded from
// the .lua files beside this one so they can be read, reviewed and tested as
// Lua.
//
// Each script is documented at its top: what KEYS and ARGV it takes and what
// it returns. The ginlimit package wraps each one once in redis.NewScript.
package lua

import _ "embed"

//go:embed sliding_log.lua
var slidingLog string

// SlidingLog returns the exact sliding-log script: ZREMRANGEBYSCORE, ZCARD
// and, only while the count is under the limit, ZADD with a unique member
// and PEXPIRE, all on the Redis clock in one atomic call.
//
// The scripts are returned by functions, not exported as variables, so no
// caller can change what another one runs.
func SlidingLog() string { return slidingLog }
