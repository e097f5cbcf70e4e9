-- Several rules decided together, atomically and all or nothing: a request
-- is admitted only if every rule admits it, and then every rule records it;
-- if any rule rejects it, none records anything.
--
-- Each rule runs the same algorithm as its single-rule script (see those
-- files for the semantics). Unlike the single sliding-log script, this one
-- always sweeps and always reports exact remaining and reset values.
--
-- KEYS[i]  rule i's key. All keys must hash to one Redis Cluster slot.
-- ARGV[1]  optional: the time in microseconds, for tests; empty means the
--          Redis clock (TIME).
-- ARGV[2 + 5*(i-1) ...]  rule i: algorithm (0 sliding log, 1 sliding
--          counter, 2 fixed window, 3 token bucket), window µs, limit,
--          parameter (sub-windows for the counter, burst for the bucket),
--          cost.
--
-- Returns {allowed (1 or 0), now_us, fired, then per rule: allowed,
-- remaining, reset_us, retry_us}, where fired is the index of the first rule
-- that rejected the request (0 when it was admitted).

local n = #KEYS
if n < 1 or #ARGV ~= 1 + 5 * n then
  return redis.error_reply('ERR ginlimit: want 5 arguments per key, after the clock')
end

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  if not now or now < 0 or now % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: the test clock must be an integer number of microseconds')
  end
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function int(v, lo, hi)
  v = tonumber(v)
  if not v or v < lo or v > hi or v % 1 ~= 0 then
    return nil
  end
  return v
end

-- Each check returns a state with ok (whether the rule would admit), and
-- the fields commit and report need. A check may sweep expired data, which
-- changes no decision; only commit records the request.

local function check_log(r)
  local card = redis.call('ZCARD', r.key)
  r.count = card - redis.call('ZREMRANGEBYSCORE', r.key, '-inf', now - r.window)
  r.ok = r.count + r.cost <= r.limit
end

local function commit_log(r)
  local base, m = nil, r.count
  for i = 1, r.cost do
    if i > 1 or redis.call('ZADD', r.key, 'NX', now, now) == 0 then
      base = base or (string.format('%d', math.floor(now / 1000000)) .. '.' .. string.format('%d', now % 1000000) .. '-')
      while redis.call('ZADD', r.key, 'NX', now, base .. m) == 0 do
        m = m + 1
      end
      m = m + 1
    end
  end
  redis.call('PEXPIRE', r.key, math.ceil(r.window / 1000))
  r.count = r.count + r.cost
end

local function report_log(r)
  r.remaining = r.limit - r.count
  r.reset, r.retry = r.window, 0
  local oldest = redis.call('ZRANGE', r.key, 0, 0, 'WITHSCORES')
  if oldest[2] then
    r.reset = tonumber(oldest[2]) + r.window - now
  end
  if not r.admitted and not r.ok then
    local k = r.count + r.cost - r.limit
    local kth = redis.call('ZRANGE', r.key, k - 1, k - 1, 'WITHSCORES')
    r.retry = r.reset
    if kth[2] then
      r.retry = tonumber(kth[2]) + r.window - now
    end
  end
end

local function check_counter(r)
  local sub = r.window / r.param
  r.sub, r.cur = sub, math.floor(now / sub)
  local first = r.cur - r.param + 1
  r.first, r.counts, r.sum = first, {}, 0
  local stale = {}
  local fields = redis.call('HGETALL', r.key)
  for i = 1, #fields, 2 do
    local idx, c = tonumber(fields[i]), tonumber(fields[i + 1])
    if idx >= first and idx <= r.cur then
      r.counts[idx] = c
      r.sum = r.sum + c
    else
      stale[#stale + 1] = fields[i]
    end
  end
  if #stale > 0 then
    redis.call('HDEL', r.key, unpack(stale))
  end
  r.ok = r.sum + r.cost <= r.limit
end

local function commit_counter(r)
  r.sum = r.sum + r.cost
  r.counts[r.cur] = (r.counts[r.cur] or 0) + r.cost
  redis.call('HINCRBY', r.key, string.format('%d', r.cur), r.cost)
  redis.call('PEXPIREAT', r.key, math.ceil((r.cur + r.param) * r.sub / 1000))
end

local function report_counter(r)
  r.remaining = r.limit - r.sum
  r.reset, r.retry = (r.cur + 1) * r.sub - now, 0
  local need = r.sum + r.cost - r.limit
  local freed, found = 0, false
  for i = r.first, r.cur do
    local c = r.counts[i]
    if c and c > 0 then
      if not found then
        r.reset, found = (i + r.param) * r.sub - now, true
      end
      freed = freed + c
      if not r.admitted and not r.ok and r.retry == 0 and freed >= need then
        r.retry = (i + r.param) * r.sub - now
      end
    end
  end
end

local function check_fixed(r)
  r.start = now - now % r.window
  local state = redis.call('HMGET', r.key, 's', 'c')
  r.count = 0
  if tonumber(state[1]) == r.start then
    r.count = tonumber(state[2]) or 0
  end
  r.ok = r.count + r.cost <= r.limit
end

local function commit_fixed(r)
  r.count = r.count + r.cost
  redis.call('HSET', r.key, 's', r.start, 'c', r.count)
  redis.call('PEXPIREAT', r.key, math.ceil((r.start + r.window) / 1000))
end

local function report_fixed(r)
  r.remaining = r.limit - r.count
  r.reset = r.start + r.window - now
  r.retry = 0
  if not r.admitted and not r.ok then
    r.retry = r.reset
  end
end

local function check_bucket(r)
  -- Exact integer GCRA, as in token_bucket.lua: times in 1/limit µs.
  r.capacity = r.param * r.window
  r.ahead = 0
  local stored = redis.call('GET', r.key)
  if stored then
    local b, a = string.match(stored, '^(%d+):(%d+)$')
    if b then
      local elapsed = now - tonumber(b)
      r.ahead = tonumber(a)
      if elapsed >= math.ceil(r.ahead / r.limit) then
        r.ahead = 0
      elseif elapsed > 0 then
        r.ahead = r.ahead - elapsed * r.limit
      end
    end
  end
  r.new_ahead = r.ahead + r.cost * r.window
  r.ok = r.new_ahead <= r.capacity
end

local function commit_bucket(r)
  r.ahead = r.new_ahead
  redis.call('SET', r.key, string.format('%d:%d', now, r.ahead), 'PX', math.max(1, math.ceil(r.ahead / r.limit / 1000)))
end

local function report_bucket(r)
  local room = r.capacity - r.ahead
  r.remaining = math.floor(room / r.window)
  r.reset = math.ceil((r.ahead - (r.capacity - (r.remaining + 1) * r.window)) / r.limit)
  r.retry = 0
  if not r.admitted and not r.ok then
    r.retry = math.ceil((r.new_ahead - r.capacity) / r.limit)
  end
end

local algos = {
  [0] = {check_log, commit_log, report_log},
  [1] = {check_counter, commit_counter, report_counter},
  [2] = {check_fixed, commit_fixed, report_fixed},
  [3] = {check_bucket, commit_bucket, report_bucket},
}

local rules = {}
for i = 1, n do
  local a = 1 + 5 * (i - 1)
  local r = {
    key = KEYS[i],
    alg = int(ARGV[a + 1], 0, 3),
    window = int(ARGV[a + 2], 1000, 1e15),
    limit = int(ARGV[a + 3], 1, 1e9),
    param = int(ARGV[a + 4], 0, 1e9),
    cost = int(ARGV[a + 5], 1, 1e9),
  }
  if not (r.alg and r.window and r.limit and r.param and r.cost) then
    return redis.error_reply('ERR ginlimit: bad arguments for rule ' .. i)
  end
  if r.alg == 1 and (r.param < 1 or r.param > 1000 or r.window % r.param ~= 0) then
    return redis.error_reply('ERR ginlimit: sub-windows of rule ' .. i .. ' must divide the window')
  end
  if r.alg == 3 and (r.param < 1 or r.param * r.window > 9007199254740992) then
    return redis.error_reply('ERR ginlimit: burst of rule ' .. i .. ' must be at least 1, and burst * window below 2^53')
  end
  rules[i] = r
end

local fired = 0
for i = 1, n do
  local r = rules[i]
  algos[r.alg][1](r)
  if not r.ok and fired == 0 then
    fired = i
  end
end

local out = {fired == 0 and 1 or 0, now, fired}
for i = 1, n do
  local r = rules[i]
  r.admitted = fired == 0
  if r.admitted then
    algos[r.alg][2](r)
  end
  algos[r.alg][3](r)
  out[#out + 1] = r.ok and 1 or 0
  out[#out + 1] = r.remaining
  out[#out + 1] = r.reset
  out[#out + 1] = r.retry
end
return out
