-- Exact sliding log.
--
-- The window is (now - window, now]: an entry whose score is exactly
-- now - window has left it. A request is admitted only while the entries
-- inside the window plus its cost fit in the limit; an admitted request is
-- recorded as one entry per unit of cost, a rejected one not at all.
--
-- Key    a ZSET with one member per admitted unit of cost, scored by its
--        admission time in microseconds. A member is that time too, written
--        as an integer; another unit in the same microsecond, or after the
--        Redis clock stepped back, gets "<sec>.<usec>-<n>" instead, which no
--        plain integer can equal. ZADD NX decides, so members are unique and
--        no admitted unit collapses into another. The key expires a window
--        (rounded up to a millisecond) after the last admission.
-- param  exact-below (an integer, at least 0): remaining and reset are exact
--        when the request is rejected or fewer than this many units remain;
--        otherwise remaining is a lower bound and reset the window, an upper
--        bound, which saves a ZREMRANGEBYSCORE and a ZRANGE on the common
--        path.
-- cost   1 to the limit.
-- State  count (units in the window; it may count expired entries while
--        more than exact-below units remain) and swept (whether check
--        removed the expired entries).
--
-- reset is the time until the oldest entry leaves the window, the first
-- moment remaining can grow (see param); retry, for a rejected request, the
-- time until enough entries have left for its cost to fit.
--

local function sliding_log_validate(window, limit, param, cost)
  if cost > limit then
    return 'cost must be at most the limit'
  end
end

-- ZCARD counts entries that have left the window too. While even that count
-- leaves at least `exact` (param) units after this request, the decision
-- cannot depend on them: they are removed only when it could, and on about
-- one call in eight to bound memory.
local function sliding_log_check(key, window, limit, param, cost)
  local count = redis.call('ZCARD', key)
  local swept = limit - count - cost < param or now % 8 == 0
  if swept then
    count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  end
  return count + cost <= limit, count, swept
end

local function sliding_log_commit(key, window, limit, param, cost, count, swept)
  local base, n = nil, count
  for i = 1, cost do
    if i > 1 or redis.call('ZADD', key, 'NX', now, now) == 0 then
      base = base or (string.format('%d', math.floor(now / 1000000)) .. '.' .. string.format('%d', now % 1000000) .. '-')
      while redis.call('ZADD', key, 'NX', now, base .. n) == 0 do
        n = n + 1
      end
      n = n + 1
    end
  end
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  return count + cost, swept
end

local function sliding_log_report(key, window, limit, param, cost, ok, admitted, count, swept)
  local reset, retry = window, 0
  if not admitted or limit - count < param then
    if not swept then
      -- Only when another rule rejected a request that this one admits
      -- without a sweep (check swept whenever this rule rejects or leaves
      -- fewer than exact-below units): sweep now, so that the oldest entry
      -- is inside the window and remaining exact.
      count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    end
    -- The set can only be empty here if its TTL (the window, rounded up to a
    -- millisecond) ran out while a very slow script ran; nothing is then
    -- left in the window, and the defaults stand.
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if oldest[2] then
      reset = tonumber(oldest[2]) + window - now
    end
    if not admitted and not ok then
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
  return limit - count, reset, retry
end
