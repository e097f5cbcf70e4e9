-- The single-rule driver: decides one request under one rule, atomically,
-- in one call. It is the hot path, so it does nothing but that: no table,
-- no loop, and one cheap test of its settings.
--
-- The rule's window (µs), limit and param are written into the script:
-- lua.Single builds one script per rule, as this file down to the line
-- "-- prologue.lua", then prologue.lua, the rule's algorithm's file, then
-- generated lines that name the algorithm's four functions and its name,
-- and give the settings,
--
--   local validate, check, commit, report = sliding_log_validate, ...
--   local alg_name = 'sliding_log'
--   local window, limit, param = 1000000, 100, 64
--
-- then the rest of this file, with rule.lua put in its error branch (at the
-- line "-- rule.lua"), so that the hot path does not make its functions.
-- So a call sends only what changes from request to request, and Redis
-- reads no setting from text on every call (a tonumber costs Redis about a
-- tenth of a microsecond).
--
-- KEYS[1]  the key.
-- ARGV[1]  the test clock or '' (prologue.lua).
-- ARGV[2]  the request's cost (an integer, 1 to 1e9, and what the
--          algorithm's validate allows: at most the limit, or the burst).
--
-- Returns {now_us, fired, ok, remaining, reset_us, retry_us}, packed as
-- lua.go says: fired is 1 when the request was rejected and 0 when it was
-- admitted and recorded; ok is 1 when it was admitted; the other three are
-- the algorithm's report.

if #KEYS ~= 1 or #ARGV ~= 2 then
  return redis.error_reply('ERR ginlimit: a single-rule script takes 1 key and 2 arguments (the clock, then the cost); got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
-- prologue.lua

-- A cost of 1, the common case, is the string '1': Lua compares interned
-- strings by address, which saves the tonumber.
local cost = ARGV[2]
if cost == '1' then
  cost = 1
else
  cost = tonumber(cost)
end
-- The settings and the cost are tested with one expression, which calls no
-- function but the algorithm's validate (ginlimit checks every rule once,
-- at start-up, so this only keeps a wrong script or caller from writing
-- nonsense); only when it fails does rule.lua say what is wrong.
if not cost or window < 1000 or window > 1e15 or limit < 1 or limit > 1e9 or param < 0 or param > 1e9
  or cost < 1 or cost > 1e9 or window % 1 + limit % 1 + param % 1 + cost % 1 ~= 0
  or validate(window, limit, param, cost) then
  -- rule.lua
  local at, name, must = bad(window, limit, param, ARGV[2])
  if at == 4 then
    return redis.error_reply('ERR ginlimit: cost (ARGV[2]) must be ' .. must)
  elseif at then
    return redis.error_reply('ERR ginlimit: the ' .. alg_name .. ' script\'s ' .. name .. ' (' .. string.format('%.17g', ({window, limit, param})[at]) .. ') must be ' .. must)
  end
  return redis.error_reply('ERR ginlimit: ' .. validate(window, limit, param, cost))
end

local key = KEYS[1]
local ok, a, b = check(key, window, limit, param, cost)
if ok then
  a, b = commit(key, window, limit, param, cost, a, b)
end
local remaining, reset, retry = report(key, window, limit, param, cost, ok, ok, a, b)
if ok then
  return pack('>i8i8i8i8i8i8', now, 0, 1, remaining, reset, retry)
end
return pack('>i8i8i8i8i8i8', now, 1, 0, remaining, reset, retry)
