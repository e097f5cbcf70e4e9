-- The single-rule driver: decides one request under one rule, atomically,
-- in one call. It is the hot path, so it does nothing but that: it makes no
-- function and no table, calls none of the algorithm's parts, and does not
-- test its settings (lua.Single did, when it wrote them in).
--
-- The generator (go generate ./lua) writes one script per algorithm,
-- gen/single_<algorithm>.lua, from this file: at "-- @settings", a line
-- that gives the rule's settings as placeholders, which lua.Single
-- replaces; at "-- @layout", the positions of the arguments from package
-- lua's constants; at "-- prologue.lua", prologue.lua and the algorithm's
-- helpers (its file before its first section); rule.lua in the error
-- branch, so that the hot path does not make its functions; and at each
-- "-- @<section>" line the algorithm's section of that name, inline,
-- inside repeat ... until true (a section leaves early with break). The
-- several-rule driver runs the same sections, each wrapped in a function
-- of its own; here they are inline, because Redis runs a script's whole
-- text on every call, so each function a script defines is made again on
-- every call, and each call to one costs more than its work on the common
-- paths. So a call sends only what changes from request to request, and
-- Redis reads no setting from text on every call.
--
-- KEYS[1]  the key.
-- ARGV[ARG_CLOCK]        the test clock or '' (prologue.lua).
-- ARGV[SINGLE_ARG_COST]  the request's cost (an integer, 1 to 1e9, and
--                        what the algorithm's validate allows: at most
--                        the limit, or the burst).
--
-- Returns {now_us, fired, ok, remaining, reset_us, retry_us}, packed as
-- lua.go says, in the order of package lua's Reply constants (the
-- generator checks it): fired is 1 when the request was rejected and 0
-- when it was admitted and recorded; ok is 1 when it was admitted; the
-- other three are the algorithm's report.

-- @settings

-- @layout

if #KEYS ~= 1 or #ARGV ~= SINGLE_ARGS then
  return redis.error_reply('ERR ginlimit: a single-rule script takes 1 key and ' .. SINGLE_ARGS .. ' arguments (the clock, then the cost); got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
-- prologue.lua

-- A cost of 1, the common case, is the string '1': Lua compares interned
-- strings by address, which saves the tonumber.
local cost = ARGV[SINGLE_ARG_COST]
if cost == '1' then
  cost = 1
else
  cost = tonumber(cost)
end
-- The cost is tested with one expression, then the algorithm's validate
-- section (ginlimit checks every rule once, at start-up, so this only keeps
-- a wrong script or caller from writing nonsense); only when one fails, or
-- settings_bad says the settings are out of range, does rule.lua say what
-- is wrong.
local invalid
if settings_bad or not cost or cost < 1 or cost > 1e9 or cost % 1 ~= 0 then
  invalid = true
else
  repeat
    -- @validate
  until true
end
if invalid then
  -- rule.lua
  local at, name, must = bad(window, limit, param, ARGV[SINGLE_ARG_COST])
  if at == 4 then
    return redis.error_reply('ERR ginlimit: cost (ARGV[' .. SINGLE_ARG_COST .. ']) must be ' .. must)
  elseif at then
    return redis.error_reply('ERR ginlimit: the ' .. alg_name .. ' script\'s ' .. name .. ' (' .. string.format('%.17g', ({window, limit, param})[at]) .. ') must be ' .. must)
  end
  return redis.error_reply('ERR ginlimit: ' .. tostring(invalid))
end

local key = KEYS[1]
local ok, a, b
repeat
  -- @check
until true
local admitted = ok
if ok then
  repeat
    -- @commit
  until true
end
local remaining, reset, retry
repeat
  -- @report
until true
if ok then
  return pack('>i8i8i8i8i8i8', now, 0, 1, remaining, reset, retry)
end
return pack('>i8i8i8i8i8i8', now, 1, 0, remaining, reset, retry)
