-- Sliding window counter.
--
-- The window is divided into N sub-windows of window/N microseconds, aligned
-- on the clock. The count of a request is the sum of the N sub-windows that
-- overlap the window ending now: the current, partial one and the N-1
-- before it. So the counted span is between (N-1)/N of the window and the
-- whole window: any span of (N-1)/N of the window admits at most limit
-- units, while a whole window's length can, in the worst case, see up to
-- 2*limit. Memory is O(N) per key, whatever the limit.
--
-- Key    a hash: sub-window index (its start / the sub-window length) ->
--        units admitted in it. The fields no longer counted are dropped
--        after the check; the key expires when the newest sub-window stops
--        being counted.
-- param  N, the number of sub-windows (an integer from 1 to 1000 that
--        divides the window).
-- cost   1 to the limit.
-- State  counts (sub-window index -> units, the counted ones) and sum.
--
-- reset is the time until the oldest counted sub-window with units in it
-- leaves (the first moment remaining can grow; the next sub-window boundary
-- when there is none), and retry, for a rejected request, the time until
-- enough of them have left for its cost to fit. Sub-window i leaves the
-- count at (i + N) * window/N.

local function sliding_counter_validate(window, limit, param, cost)
  if param < 1 or param > 1000 or window % param ~= 0 then
    return 'sub-windows (param) must be an integer from 1 to 1000 that divides the window'
  end
  if cost > limit then
    return 'cost must be at most the limit'
  end
end

-- check reads every field and sums the counted ones: the N sub-windows
-- that overlap the window ending now, and any newer one (there are such
-- after the clock stepped back: they count until they leave, which only
-- rejects more). It only reads, so that the first write of an admission is
-- its HINCRBY, which Redis refuses before anything is written when it is
-- out of memory; the fields no longer counted are deleted after it, or by
-- report when nothing is committed.
local function sliding_counter_check(key, window, limit, param, cost)
  local cur = math.floor(now / (window / param))
  local first = cur - param + 1 -- the oldest sub-window still counted
  local counts, sum, stale, last = {}, 0, nil, nil
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    local idx, c = tonumber(fields[i]), tonumber(fields[i + 1])
    if idx and c and idx >= first then
      counts[idx] = c
      sum = sum + c
      if idx > cur and (not last or idx > last) then
        last = idx
      end
    else
      stale = stale or {}
      stale[#stale + 1] = fields[i]
    end
  end
  -- The fields to delete, and the newest counted sub-window when it is
  -- newer than the current one (after the clock stepped back).
  -- (Assigning nil would still make room for the key.)
  if stale then
    counts.stale = stale
  end
  if last then
    counts.last = last
  end
  return sum + cost <= limit, counts, sum
end

-- sliding_counter_sweep deletes the fields check found no longer counted.
local function sliding_counter_sweep(key, counts)
  local stale = counts.stale
  if stale then
    redis.call('HDEL', key, unpack(stale))
    counts.stale = nil
  end
end

local function sliding_counter_commit(key, window, limit, param, cost, counts, sum)
  local sub = window / param
  local cur = math.floor(now / sub)
  counts[cur] = (counts[cur] or 0) + cost
  redis.call('HINCRBY', key, string.format('%d', cur), cost .. '')
  -- The newest sub-window is counted until its index + N; keep it that long.
  redis.call('PEXPIREAT', key, math.ceil(((counts.last or cur) + param) * sub / 1000) .. '')
  sliding_counter_sweep(key, counts)
  return counts, sum + cost
end

local function sliding_counter_report(key, window, limit, param, cost, ok, admitted, counts, sum)
  if not admitted then
    sliding_counter_sweep(key, counts)
  end
  local sub = window / param
  local cur = math.floor(now / sub)
  local reset, retry = (cur + 1) * sub - now, 0
  local need = sum + cost - limit -- units that must leave before a retry fits
  local want = not admitted and not ok
  local freed, found = 0, false
  for i = cur - param + 1, counts.last or cur do
    local c = counts[i]
    if c and c > 0 then
      if not found then
        reset = (i + param) * sub - now
        found = true
      end
      freed = freed + c
      if want and retry == 0 and freed >= need then
        retry = (i + param) * sub - now
      end
    end
  end
  return limit - sum, reset, retry
end
