-- The start of every script (lua.go puts it in front of each): it checks the
-- number of arguments, reads the clock, and defines the helpers that both
-- drivers and every algorithm share.
--
-- Every script takes the same layout, n >= 1 rules (single.lua: exactly 1):
--
-- KEYS[i]            rule i's key.
-- ARGV[1]            the time in microseconds, for tests (an integer from 0
--                    to 2^53); empty means the Redis clock (TIME).
-- ARGV[2 + 5*(i-1)]  rule i's algorithm number (see lua.go).
-- ARGV[3 + 5*(i-1)]  its window in microseconds (an integer, 1000 to 1e15).
-- ARGV[4 + 5*(i-1)]  its limit (an integer, 1 to 1e9).
-- ARGV[5 + 5*(i-1)]  its param (an integer, 0 to 1e9; what it means is the
--                    algorithm's: see each algorithm's file).
-- ARGV[6 + 5*(i-1)]  the request's cost under it (an integer, 1 to 1e9).
--
-- It leaves now, the time in µs (a number, exact below 2^53); int(v, lo,
-- hi), v as an integer from lo to hi or nil; and rule(i), rule i's window,
-- limit, param and cost checked against those ranges.

if #KEYS < 1 or #ARGV ~= 1 + 5 * #KEYS then
  return redis.error_reply('ERR ginlimit: want 1 + 5*#KEYS arguments (the clock, then algorithm, window, limit, param and cost per key) and at least 1 key; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end

local function int(v, lo, hi)
  v = tonumber(v)
  if not v or v < lo or v > hi or v % 1 ~= 0 then
    return nil
  end
  return v
end

local now
if ARGV[1] ~= '' then
  now = int(ARGV[1], 0, 9007199254740992)
  if not now then
    return redis.error_reply('ERR ginlimit: the test clock (ARGV[1]) must be an integer number of microseconds from 0 to 2^53, or empty for the Redis clock')
  end
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- rule(i) returns rule i's window, limit, param and cost, checked against
-- those ranges, or nil and what is wrong with its arguments. The algorithm
-- number, ARGV[5*i - 3], is the driver's to read. (The checks are int's,
-- written out: this runs on every call.)
local function rule(i)
  local a = 5 * i - 3
  local window = tonumber(ARGV[a + 1])
  if not window or window < 1000 or window > 1e15 or window % 1 ~= 0 then
    return nil, 'window (ARGV[' .. (a + 1) .. ']) must be an integer number of microseconds from 1000 to 1e15'
  end
  local limit = tonumber(ARGV[a + 2])
  if not limit or limit < 1 or limit > 1e9 or limit % 1 ~= 0 then
    return nil, 'limit (ARGV[' .. (a + 2) .. ']) must be an integer from 1 to 1e9'
  end
  local param = tonumber(ARGV[a + 3])
  if not param or param < 0 or param > 1e9 or param % 1 ~= 0 then
    return nil, 'param (ARGV[' .. (a + 3) .. ']) must be an integer from 0 to 1e9'
  end
  local cost = tonumber(ARGV[a + 4])
  if not cost or cost < 1 or cost > 1e9 or cost % 1 ~= 0 then
    return nil, 'cost (ARGV[' .. (a + 4) .. ']) must be an integer from 1 to 1e9'
  end
  return window, limit, param, cost
end
