-- Exact sliding log. One call decides one request atomically.
--
-- KEYS[1]  the ZSET that holds one member per admitted unit of cost, scored
--          by its admission time in microseconds of the Redis clock.
-- ARGV[1]  the window in microseconds (an integer, at least 1000).
-- ARGV[2]  the limit (an integer, at least 1).
-- ARGV[3]  exact-below: remaining and reset_us are exact when the request
--          is rejected or fewer than this many units remain; otherwise
--          remaining is a lower bound and reset_us the window, an upper
--          bound, which saves a ZREMRANGEBYSCORE and a ZRANGE on the common
--          path (an integer, at least 0).
-- ARGV[4]  the cost of the request (an integer, 1 to limit).
-- ARGV[5]  optional: the time in microseconds, for tests; empty or absent
--          means the Redis clock (TIME).
--
-- prologue.lua, put in front of this file, checks ARGV[1], ARGV[2] and
-- ARGV[5] and leaves key, window, limit, now, sec and usec.
--
-- The window is (now - window, now]: an entry whose score is exactly
-- now - window has left it. A request is admitted and recorded only while
-- the entries inside the window plus its cost fit in the limit; a rejected
-- request is not recorded.
--
-- Returns {allowed (1 or 0), remaining, reset_us, now_us, retry_us}:
-- reset_us is the time until the oldest entry leaves the window, the first
-- moment remaining can grow (see ARGV[3]); retry_us, for a rejected request,
-- is the time until enough entries have left for its cost to fit.

local exact = tonumber(ARGV[3])
if not exact or exact < 0 or exact % 1 ~= 0 then
  return redis.error_reply('ERR ginlimit: exact-below must be an integer >= 0')
end
local cost = tonumber(ARGV[4])
if not cost or cost < 1 or cost % 1 ~= 0 or cost > limit then
  return redis.error_reply('ERR ginlimit: cost must be an integer from 1 to the limit')
end

-- ZCARD counts entries that have left the window too. While even that
-- count leaves more than `exact` units after this request, the decision
-- cannot depend on them: they are removed only when it could, and on about
-- one call in eight to bound memory. Remaining is then exact below `exact`
-- and a lower bound above it.
local count = redis.call('ZCARD', key)
if limit - count - cost < exact or now % 8 == 0 then
  count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
end

local allowed = 0
if count + cost <= limit then
  -- A member is the admission time in µs, passed as a number, which Redis
  -- writes as an integer (and a listpack stores compactly). Another unit in
  -- the same microsecond, or after the Redis clock stepped back, gets
  -- "<sec>.<usec>-<n>" instead, which no plain integer can equal; ZADD NX
  -- decides, so members are unique and no admitted unit collapses into
  -- another.
  local base, n = nil, count
  for i = 1, cost do
    if i > 1 or redis.call('ZADD', key, 'NX', now, now) == 0 then
      base = base or (sec .. '.' .. usec .. '-')
      while redis.call('ZADD', key, 'NX', now, base .. n) == 0 do
        n = n + 1
      end
      n = n + 1
    end
  end
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  count = count + cost
  allowed = 1
end

local remaining = limit - count
local reset, retry = window, 0
if allowed == 0 or remaining < exact then
  -- The set can only be empty here if its TTL (the window, rounded up to
  -- a millisecond) ran out while a very slow script ran; nothing is then
  -- left in the window, and the defaults stand.
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if oldest[2] then
    reset = tonumber(oldest[2]) + window - now
  end
  if allowed == 0 then
    -- The request fits once count + cost - limit entries have left.
    local k = count + cost - limit
    retry = reset
    if k > 1 then
      local kth = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
      if kth[2] then
        retry = tonumber(kth[2]) + window - now
      end
    end
  end
end
return {allowed, remaining, reset, now, retry}
