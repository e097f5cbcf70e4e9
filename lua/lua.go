// Package lua holds the Redis Lua scripts that ginlimit runs, embedded from
// the .lua files beside this one so they can be read, reviewed and tested as
// Lua.
//
// Every script decides one request atomically in one call and takes the same
// arguments: KEYS[1] the key; ARGV the window in µs, the limit, one
// algorithm parameter, the request's cost, and an optional test clock in µs
// (empty means Redis TIME). prologue.lua checks the shared arguments and
// reads the clock; each function returns it followed by its algorithm's
// file. Every script returns {allowed, remaining,
// reset_us, now_us, retry_us}. Each file documents the details at its top.
// The ginlimit package wraps each one once in redis.NewScript.
//
// The scripts are returned by functions, not exported as variables, so no
// caller can change what another one runs.
package lua

import _ "embed"

var (
	//go:embed prologue.lua
	prologue string
	//go:embed sliding_log.lua
	slidingLog string
	//go:embed sliding_counter.lua
	slidingCounter string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed token_bucket.lua
	tokenBucket string
	//go:embed multi.lua
	multi string
)

// SlidingLog returns the exact sliding-log script: a ZSET of admission
// times on the Redis clock.
func SlidingLog() string { return prologue + slidingLog }

// SlidingCounter returns the sliding-window-counter script: a hash of N
// sub-window counts.
func SlidingCounter() string { return prologue + slidingCounter }

// FixedWindow returns the fixed-window script: one count per aligned window.
func FixedWindow() string { return prologue + fixedWindow }

// TokenBucket returns the token-bucket script in its GCRA form: one
// timestamp per key.
func TokenBucket() string { return prologue + tokenBucket }

// Multi returns the script that decides several rules, of any algorithms,
// atomically and all or nothing. Its arguments differ from the others': see
// its header.
func Multi() string { return multi }
