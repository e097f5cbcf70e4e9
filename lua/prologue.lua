-- The start of every single-rule script (lua.go puts it in front of each):
-- it checks the arguments they share and reads the clock.
--
-- KEYS[1]  the rule's key.
-- ARGV[1]  the window in microseconds (an integer from 1000 to 1e15).
-- ARGV[2]  the limit (an integer from 1 to 1e9).
-- ARGV[5]  optional: the time in microseconds, for tests; empty or absent
--          means the Redis clock (TIME).
--
-- It leaves key, window, limit and now (µs), and sec and usec (the same
-- time as strings of whole seconds and microseconds), for the script.

local window = tonumber(ARGV[1])
if not window or window < 1000 or window % 1 ~= 0 or window > 1e15 then
  return redis.error_reply('ERR ginlimit: window must be an integer number of microseconds from 1000 to 1e15')
end
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit % 1 ~= 0 or limit > 1e9 then
  return redis.error_reply('ERR ginlimit: limit must be an integer from 1 to 1e9')
end

local key = KEYS[1]
local now, sec, usec
if ARGV[5] and ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
  if not now or now < 0 or now % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: the test clock must be an integer number of microseconds')
  end
  sec, usec = string.format('%d', math.floor(now / 1000000)), string.format('%d', now % 1000000)
else
  local t = redis.call('TIME')
  sec, usec = t[1], t[2]
  now = tonumber(sec) * 1000000 + tonumber(usec)
end
