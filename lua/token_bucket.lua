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
--
-- remaining is the whole tokens left, reset the time until the next whole
-- token, and retry, for a rejected request, the time until its cost fits,
-- both rounded up to whole microseconds.

local token_bucket = {
  validate = function(r)
    if r.param < 1 then
      return 'burst (param) must be at least 1'
    end
    if r.cost > r.param then
      return 'cost must be at most the burst (param)'
    end
    if r.param * r.window > 9007199254740992 then
      return 'burst (param) * window must not exceed 2^53'
    end
  end,

  check = function(r)
    local limit, window = r.limit, r.window
    local ahead = 0
    local stored = redis.call('GET', r.key)
    if stored then
      local b, a = string.match(stored, '^(%d+):(%d+)$')
      if b then
        local elapsed = now - tonumber(b)
        ahead = tonumber(a)
        -- Drain elapsed µs, each worth limit units; compare first so the
        -- product stays small (elapsed*limit < ahead <= capacity <= 2^53).
        if elapsed >= math.ceil(ahead / limit) then
          ahead = 0
        elseif elapsed > 0 then
          ahead = ahead - elapsed * limit
        end
      end
    end
    local capacity = r.param * window -- in 1/limit µs, like ahead
    local new_ahead = ahead + r.cost * window
    r.capacity, r.ahead, r.new_ahead = capacity, ahead, new_ahead
    r.ok = new_ahead <= capacity
  end,

  commit = function(r)
    local ahead = r.new_ahead
    r.ahead = ahead
    redis.call('SET', r.key, string.format('%d:%d', now, ahead), 'PX', math.max(1, math.ceil(ahead / r.limit / 1000)))
  end,

  report = function(r)
    local capacity, window, limit, ahead = r.capacity, r.window, r.limit, r.ahead
    local remaining = math.floor((capacity - ahead) / window)
    -- The next whole token: ahead must fall to capacity - (remaining+1)*window.
    r.remaining = remaining
    r.reset = math.ceil((ahead - (capacity - (remaining + 1) * window)) / limit)
    if not r.admitted and not r.ok then
      r.retry = math.ceil((r.new_ahead - capacity) / limit)
    else
      r.retry = 0
    end
  end,
}
