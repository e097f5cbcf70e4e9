-- Fixed window. One call decides one request atomically.
--
-- Windows are aligned to multiples of the window length on the Redis clock
-- (in microseconds since the Unix epoch). Up to limit units are admitted per
-- window, so across a boundary up to twice the limit can pass within one
-- window's length.
--
-- KEYS[1]  a hash: s = the start of the window the count belongs to (µs),
--          c = the units admitted in it.
-- ARGV[1]  the window in microseconds (an integer, at least 1000).
-- ARGV[2]  the limit (an integer, at least 1).
-- ARGV[3]  unused.
-- ARGV[4]  the cost of the request (an integer, 1 to limit).
-- ARGV[5]  optional: the time in microseconds, for tests; empty or absent
--          means the Redis clock (TIME).
--
-- prologue.lua, put in front of this file, checks ARGV[1], ARGV[2] and
-- ARGV[5] and leaves key, window, limit, now, sec and usec.
--
-- Returns {allowed (1 or 0), remaining, reset_us, now_us, retry_us}: reset_us
-- is the time until the window ends, when remaining grows back to the
-- limit; retry_us, for a rejected request, is the same.

local cost = tonumber(ARGV[4])
if not cost or cost < 1 or cost % 1 ~= 0 or cost > limit then
  return redis.error_reply('ERR ginlimit: cost must be an integer from 1 to the limit')
end

local start = now - now % window
local state = redis.call('HMGET', key, 's', 'c')
local count = 0
if tonumber(state[1]) == start then
  count = tonumber(state[2]) or 0
end

local reset = start + window - now
local allowed, retry = 0, reset
if count + cost <= limit then
  count = count + cost
  allowed, retry = 1, 0
  redis.call('HSET', key, 's', start, 'c', count)
  -- The key outlives its window by less than a millisecond at most; the
  -- stored start tells a stale count from a current one.
  redis.call('PEXPIREAT', key, math.ceil((start + window) / 1000))
end
return {allowed, limit - count, reset, now, retry}
