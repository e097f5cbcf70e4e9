-- Token bucket in its single-timestamp form, GCRA, in exact integer
-- arithmetic. One call decides one request atomically.
--
-- The bucket holds up to burst tokens and refills at limit tokens per
-- window: one token every T = window/limit µs. GCRA keeps how far the
-- theoretical arrival time (TAT) is ahead of now; a request of cost n
-- conforms when ahead + n*T <= burst*T. To stay exact, every time is kept in
-- units of 1/limit µs, where T is exactly `window` and the capacity exactly
-- burst*window (burst*window must stay below 2^53).
--
-- KEYS[1]  a string "<base>:<ahead>": the µs time of the last admission and
--          how far the TAT was then ahead of it, in 1/limit µs.
-- ARGV[1]  the window in microseconds (an integer, at least 1000).
-- ARGV[2]  the limit: tokens refilled per window (an integer, at least 1).
-- ARGV[3]  the burst: the bucket's capacity (an integer, at least 1).
-- ARGV[4]  the cost of the request (an integer, 1 to burst).
-- ARGV[5]  optional: the time in microseconds, for tests; empty or absent
--          means the Redis clock (TIME).
--
-- prologue.lua, put in front of this file, checks ARGV[1], ARGV[2] and
-- ARGV[5] and leaves key, window, limit, now, sec and usec.
--
-- Returns {allowed (1 or 0), remaining, reset_us, now_us, retry_us}:
-- remaining is the whole tokens left, reset_us the time until the next whole
-- token, and retry_us, for a rejected request, the time until its cost fits,
-- both rounded up to whole microseconds.

local burst = tonumber(ARGV[3])
if not burst or burst < 1 or burst % 1 ~= 0 or burst > 1e9 then
  return redis.error_reply('ERR ginlimit: burst must be an integer >= 1')
end
local cost = tonumber(ARGV[4])
if not cost or cost < 1 or cost % 1 ~= 0 or cost > burst then
  return redis.error_reply('ERR ginlimit: cost must be an integer from 1 to the burst')
end

if burst * window > 9007199254740992 then
  return redis.error_reply('ERR ginlimit: burst * window must stay below 2^53')
end
local capacity = burst * window -- in 1/limit µs, like ahead
local ahead = 0
local stored = redis.call('GET', key)
if stored then
  local b, a = string.match(stored, '^(%d+):(%d+)$')
  if b then
    local elapsed = now - tonumber(b)
    ahead = tonumber(a)
    -- Drain elapsed µs, each worth limit units; compare first so the
    -- product stays small (elapsed*limit < ahead <= capacity < 2^53).
    if elapsed >= math.ceil(ahead / limit) then
      ahead = 0
    elseif elapsed > 0 then
      ahead = ahead - elapsed * limit
    end
  end
end

local allowed, retry = 0, 0
local new_ahead = ahead + cost * window
if new_ahead <= capacity then
  allowed, ahead = 1, new_ahead
  -- The key expires when the bucket is full again.
  redis.call('SET', key, string.format('%d:%d', now, ahead), 'PX', math.max(1, math.ceil(ahead / limit / 1000)))
else
  retry = math.ceil((new_ahead - capacity) / limit)
end

local room = capacity - ahead
local remaining = math.floor(room / window)
-- The next whole token: ahead must fall to capacity - (remaining+1)*window.
local reset = math.ceil((ahead - (capacity - (remaining + 1) * window)) / limit)
return {allowed, remaining, reset, now, retry}
