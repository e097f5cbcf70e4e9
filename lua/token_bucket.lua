-- Token bucket in its single-timestamp form, GCRA. One call decides one
-- request atomically.
--
-- The bucket holds up to burst tokens and refills at limit tokens per
-- window. The key stores the theoretical arrival time (TAT): the moment the
-- bucket would be full again. A request of cost n conforms when
-- max(TAT, now) + n*T - now <= burst*T, where T = window / limit is the time
-- one token takes to refill.
--
-- KEYS[1]  a string: the TAT in microseconds on the Redis clock.
-- ARGV[1]  the window in microseconds (an integer, at least 1000).
-- ARGV[2]  the limit: tokens refilled per window (an integer, at least 1).
-- ARGV[3]  the burst: the bucket's capacity (an integer, at least 1).
-- ARGV[4]  the cost of the request (an integer, 1 to burst).
-- ARGV[5]  optional: the time in microseconds, for tests; empty or absent
--          means the Redis clock (TIME).
--
-- Returns {allowed (1 or 0), remaining, reset_us, now_us, retry_us}:
-- remaining is the whole tokens left, reset_us the time until the next whole
-- token, and retry_us, for a rejected request, the time until its cost fits.
-- Times are rounded up to whole microseconds.

local window = tonumber(ARGV[1])
if not window or window < 1000 or window % 1 ~= 0 or window > 1e15 then
  return redis.error_reply('ERR ginlimit: window must be an integer number of microseconds >= 1000')
end
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit % 1 ~= 0 or limit > 1e9 then
  return redis.error_reply('ERR ginlimit: limit must be an integer >= 1')
end
local burst = tonumber(ARGV[3])
if not burst or burst < 1 or burst % 1 ~= 0 or burst > 1e9 then
  return redis.error_reply('ERR ginlimit: burst must be an integer >= 1')
end
local cost = tonumber(ARGV[4])
if not cost or cost < 1 or cost % 1 ~= 0 or cost > burst then
  return redis.error_reply('ERR ginlimit: cost must be an integer from 1 to the burst')
end

local key = KEYS[1]
local now
if ARGV[5] and ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
  if not now or now < 0 or now % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: the test clock must be an integer number of microseconds')
  end
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local T = window / limit
local capacity = burst * T
local tat = tonumber(redis.call('GET', key)) or now
if tat < now then
  tat = now
end
local new_tat = tat + cost * T

local allowed, retry = 0, 0
if new_tat - now <= capacity then
  allowed = 1
  tat = new_tat
  -- %.17g keeps every bit of the double, so the next call reads it back
  -- exactly. The key expires when the bucket is full again.
  redis.call('SET', key, string.format('%.17g', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
else
  retry = math.ceil(new_tat - capacity - now)
end

-- Free room in the bucket, in time: capacity - (tat - now).
local room = capacity - (tat - now)
local remaining = math.floor(room / T)
local reset = math.ceil((remaining + 1) * T - room)
return {allowed, remaining, reset, now, retry}
