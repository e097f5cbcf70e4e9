-- Token bucket in its single-timestamp form, GCRA, in exact integer
-- arithmetic.
--
-- The bucket holds up to burst tokens and refills at limit tokens per
-- window: one token every T = window/limit µs. GCRA keeps how far the
-- theoretical arrival time (TAT) is ahead of now; a request of cost n
-- conforms when ahead + n*T <= burst*T. To stay exact, every time is kept in
-- units of 1/limit µs, where T is exactly `window` and the capacity exactly
-- burst*window (which must not exceed 2^53).
--
-- Key    a string "<base>:<ahead>": the µs time of the last admission and
--        how far the TAT was then ahead of it, in 1/limit µs. The key
--        expires when the bucket is full again.
-- param  the burst: the bucket's capacity (an integer, at least 1, with
--        burst*window at most 2^53).
-- cost   1 to the burst.
-- State  ahead (now, in 1/limit µs) and new_ahead (what it would be with
--        this request).
--
-- remaining is the whole tokens left, reset the time until the next whole
-- token, and retry, for a rejected request, the time until its cost fits,
-- both rounded up to whole microseconds.
--
-- When the clock steps back, the stored TAT stays where it was, so it is
-- further ahead of now (possibly more than the capacity: remaining is then
-- 0), and nothing more is admitted than without the step; reset and retry
-- count to that TAT.

local function token_bucket_validate(window, limit, param, cost)
  if param < 1 then
    return 'burst (param) must be at least 1'
  end
  if cost > param then
    return 'cost must be at most the burst (param)'
  end
  if param * window > 9007199254740992 then
    return 'burst (param) * window must not exceed 2^53'
  end
end

local function token_bucket_check(key, window, limit, param, cost)
  local ahead = 0
  local stored = redis.call('GET', key)
  if stored then
    local b, a = string.match(stored, '^(%d+):(%d+)$')
    if b then
      local elapsed = now - tonumber(b)
      ahead = tonumber(a)
      -- Drain elapsed µs, each worth limit units; compare first so the
      -- product stays small (elapsed*limit < ahead <= capacity <= 2^53).
      -- When the clock has stepped back, elapsed < 0 and the TAT stays
      -- where it was, further ahead of now: that only rejects more, and
      -- the reset and retry still say when a token is back.
      if elapsed >= math.ceil(ahead / limit) then
        ahead = 0
      else
        ahead = ahead - elapsed * limit
      end
    end
  end
  local new_ahead = ahead + cost * window
  return new_ahead <= param * window, ahead, new_ahead -- the capacity is in 1/limit µs, like ahead
end

local function token_bucket_commit(key, window, limit, param, cost, ahead, new_ahead)
  redis.call('SET', key, string.format('%d:%d', now, new_ahead), 'PX', math.max(1, math.ceil(new_ahead / limit / 1000)) .. '')
  return new_ahead, new_ahead
end

local function token_bucket_report(key, window, limit, param, cost, ok, admitted, ahead, new_ahead)
  local capacity = param * window
  local remaining = math.floor((capacity - ahead) / window)
  if remaining < 0 then
    -- ahead exceeds the capacity only after the clock stepped back.
    remaining = 0
  end
  -- The next whole token: ahead must fall to capacity - (remaining+1)*window.
  local reset = math.ceil((ahead - (capacity - (remaining + 1) * window)) / limit)
  if not admitted and not ok then
    return remaining, reset, math.ceil((new_ahead - capacity) / limit)
  end
  return remaining, reset, 0
end
