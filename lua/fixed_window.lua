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
--
-- reset is the time until the window ends, when remaining grows back to the
-- limit; retry, for a rejected request, is the same.

local fixed_window = {
  validate = function(r)
    if r.cost > r.limit then
      return 'cost must be at most the limit'
    end
  end,

  check = function(r)
    local start = now - now % r.window
    local state = redis.call('HMGET', r.key, 's', 'c')
    local count = 0
    if tonumber(state[1]) == start then
      count = tonumber(state[2]) or 0
    end
    r.start, r.count = start, count
    r.ok = count + r.cost <= r.limit
  end,

  commit = function(r)
    local key, start, count = r.key, r.start, r.count + r.cost
    r.count = count
    redis.call('HSET', key, 's', start, 'c', count)
    redis.call('PEXPIREAT', key, math.ceil((start + r.window) / 1000))
  end,

  report = function(r)
    local reset = r.start + r.window - now
    r.remaining, r.reset, r.retry = r.limit - r.count, reset, 0
    if not r.admitted and not r.ok then
      r.retry = reset
    end
  end,
}
