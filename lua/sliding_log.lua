-- Exact sliding log. One call decides one request atomically.
--
-- KEYS[1]  the ZSET that holds one member per admitted request, scored by
--          its admission time in microseconds of the Redis clock.
-- ARGV[1]  the window in microseconds (an integer, at least 1000).
-- ARGV[2]  the limit (an integer, at least 1).
-- ARGV[3]  exact-below: remaining and reset_us are exact when the request
--          is rejected or fewer than this many requests remain; otherwise
--          remaining is a lower bound and reset_us the window, an upper
--          bound, which saves a ZREMRANGEBYSCORE and a ZRANGE on the common
--          path (an integer, at least 0).
--
-- The window is (now - window, now]: an entry whose score is exactly
-- now - window has left it. A request is admitted and recorded only while
-- fewer than limit entries are inside the window; a rejected request is
-- not recorded.
--
-- Returns {allowed (1 or 0), remaining, reset_us, now_us}, where reset_us is
-- the time until the oldest recorded entry leaves the window, which is when
-- more quota becomes available (see ARGV[3]), and now_us is the Redis TIME
-- used.

local window = tonumber(ARGV[1])
if not window or window < 1000 or window % 1 ~= 0 or window > 1e15 then
  return redis.error_reply('ERR ginlimit: window must be an integer number of microseconds >= 1000')
end
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit % 1 ~= 0 or limit > 1e9 then
  return redis.error_reply('ERR ginlimit: limit must be an integer >= 1')
end

local exact = tonumber(ARGV[3])
if not exact or exact < 0 or exact % 1 ~= 0 then
  return redis.error_reply('ERR ginlimit: exact-below must be an integer >= 0')
end

local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- ZCARD counts entries that have left the window too. While even that
-- count leaves more than `exact` requests, the decision cannot depend on
-- them: they are removed only when it could, and on about one call in
-- eight to bound memory. Remaining is then exact below `exact` and a lower
-- bound above it.
local count = redis.call('ZCARD', key)
if limit - count <= exact or now % 8 == 0 then
  count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
end
local allowed = 0
if count < limit then
  -- The member is the admission time in µs, passed as a number, which Redis
  -- writes as an integer (and a listpack stores compactly). A request in the
  -- same microsecond, or after the Redis clock stepped back, gets
  -- "<sec>.<usec>-<n>" instead, which no plain integer can equal; ZADD NX
  -- decides, so members are unique and no admitted request collapses into
  -- another.
  if redis.call('ZADD', key, 'NX', now, now) == 0 then
    local base = t[1] .. '.' .. t[2] .. '-'
    local n = count
    while redis.call('ZADD', key, 'NX', now, base .. n) == 0 do
      n = n + 1
    end
  end
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  count = count + 1
  allowed = 1
end

local remaining = limit - count
local reset = window
if allowed == 0 or remaining < exact then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  reset = tonumber(oldest[2]) + window - now
end
return {allowed, remaining, reset, now}
