-- Sliding window counter. One call decides one request atomically.
--
-- The window is divided into N sub-windows of window/N microseconds,
-- aligned on the Redis clock. The count of a request is the sum of the N
-- sub-windows that overlap the window ending now: the current, partial one
-- and the N-1 before it. So the counted span is between (N-1)/N of the
-- window and the whole window: any span of (N-1)/N of the window admits at
-- most limit units, while a whole window's length can, in the worst case,
-- see up to 2*limit. Memory is O(N) per key, whatever the limit.
--
-- KEYS[1]  a hash: sub-window index (start / sub-window length) -> units.
-- ARGV[1]  the window in microseconds (an integer, at least 1000).
-- ARGV[2]  the limit (an integer, at least 1).
-- ARGV[3]  N, the number of sub-windows (an integer from 1 to 1000 that
--          divides the window).
-- ARGV[4]  the cost of the request (an integer, 1 to limit).
-- ARGV[5]  optional: the time in microseconds, for tests; empty or absent
--          means the Redis clock (TIME).
--
-- prologue.lua, put in front of this file, checks ARGV[1], ARGV[2] and
-- ARGV[5] and leaves key, window, limit, now, sec and usec.
--
-- Returns {allowed (1 or 0), remaining, reset_us, now_us, retry_us}:
-- reset_us is the time until the oldest counted sub-window with units in it
-- leaves (the first moment remaining can grow; the next sub-window boundary
-- when there is none), and retry_us, for a rejected request, the time until
-- enough of them have left for its cost to fit.

local n = tonumber(ARGV[3])
if not n or n < 1 or n > 1000 or n % 1 ~= 0 or window % n ~= 0 then
  return redis.error_reply('ERR ginlimit: sub-windows must be an integer from 1 to 1000 that divides the window')
end
local cost = tonumber(ARGV[4])
if not cost or cost < 1 or cost % 1 ~= 0 or cost > limit then
  return redis.error_reply('ERR ginlimit: cost must be an integer from 1 to the limit')
end

local sub = window / n
local cur = math.floor(now / sub)
local first = cur - n + 1 -- the oldest sub-window still counted

-- Read every field, sum the counted ones, drop the rest.
local counts = {}
local sum = 0
local stale = {}
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local idx, c = tonumber(fields[i]), tonumber(fields[i + 1])
  if idx >= first and idx <= cur then
    counts[idx] = c
    sum = sum + c
  else
    stale[#stale + 1] = fields[i]
  end
end
if #stale > 0 then
  redis.call('HDEL', key, unpack(stale))
end

local allowed, retry = 0, 0
if sum + cost <= limit then
  allowed = 1
  sum = sum + cost
  counts[cur] = (counts[cur] or 0) + cost
  redis.call('HINCRBY', key, string.format('%d', cur), cost)
  -- The current sub-window is counted until cur + n; keep it that long.
  redis.call('PEXPIREAT', key, math.ceil((cur + n) * sub / 1000))
end

-- Sub-window i leaves the count at (i + n) * sub.
local reset = (cur + 1) * sub - now
local need = sum + cost - limit -- units that must leave before a retry fits
local freed = 0
local found = false
for i = first, cur do
  local c = counts[i]
  if c and c > 0 then
    if not found then
      reset = (i + n) * sub - now
      found = true
    end
    freed = freed + c
    if allowed == 0 and retry == 0 and freed >= need then
      retry = (i + n) * sub - now
    end
  end
end
return {allowed, limit - sum, reset, now, retry}
