-- Fixed window.
--
-- Windows are aligned to multiples of the window length on the clock (in
-- microseconds since the Unix epoch). Up to limit units are admitted per
-- window, so across a boundary up to twice the limit can pass within one
-- window's length.
--
-- Key    a hash: s = the start of the window the count belongs to (µs),
--        c = the units admitted in it. The key expires with its window (less
--        than a millisecond later at most); the stored start tells a stale
--        count from a current one.
-- param  unused (0).
-- cost   1 to the limit.
-- State  start (the window's start, µs) and count (units admitted in it).
--
-- reset is the time until the window ends, when remaining grows back to the
-- limit; retry, for a rejected request, is the same. check only reads, so
-- the first write of an admission is its HSET, which Redis refuses before
-- anything is written when it is out of memory.

local function fixed_window_validate(window, limit, param, cost)
  if cost > limit then
    return 'cost must be at most the limit'
  end
end

-- A stored window that starts at or after the current one still counts:
-- after the clock stepped back, the count goes on in that newer window until
-- it ends, which only rejects more.
local function fixed_window_check(key, window, limit, param, cost)
  local start = now - now % window
  local state = redis.call('HMGET', key, 's', 'c')
  local count = 0
  local s = tonumber(state[1])
  if s and s >= start then
    start, count = s, tonumber(state[2]) or 0
  end
  return count + cost <= limit, start, count
end

local function fixed_window_commit(key, window, limit, param, cost, start, count)
  count = count + cost
  redis.call('HSET', key, 's', string.format('%d', start), 'c', count .. '')
  redis.call('PEXPIREAT', key, math.ceil((start + window) / 1000) .. '')
  return start, count
end

local function fixed_window_report(key, window, limit, param, cost, ok, admitted, start, count)
  local reset = start + window - now
  if not admitted and not ok then
    return limit - count, reset, reset
  end
  return limit - count, reset, 0
end
