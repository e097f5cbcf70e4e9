-- The single-rule driver: decides one request under one rule, atomically,
-- in one call. It is the hot path, so it does nothing but that: no table,
-- no loop, and one cheap test of its arguments.
--
-- lua.go builds the script as prologue.lua, the rule's algorithm's file,
-- then generated lines that name the algorithm's four functions, its number
-- in ARGV[2] (as a string: ARGV[2] must be exactly that decimal, which saves
-- a tonumber) and its name,
--
--   local validate, check, commit, report = sliding_log_validate, ...
--   local alg_number, alg_name = '0', 'sliding_log'
--
-- then this file, with rule.lua put in its error branch (at the line
-- "-- rule.lua"), so that the hot path does not make its functions. The
-- arguments are prologue.lua's with exactly one key:
-- KEYS[1] the key, ARGV[1] the test clock or '', ARGV[2..6] the algorithm
-- number, window, limit, param and cost.
--
-- Returns {now_us, fired, ok, remaining, reset_us, retry_us}, packed as
-- lua.go says: fired is 1 when the request was rejected and 0 when it was
-- admitted and recorded; ok is 1 when it was admitted; the other three are
-- the algorithm's report.

-- The arguments are tested with one expression, which calls no function
-- but the algorithm's validate (ginlimit checks every rule once, at
-- start-up, so this only keeps a wrong caller from writing nonsense); only
-- when it fails does rule() say what is wrong.
local window, limit, param, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if #KEYS ~= 1 or ARGV[2] ~= alg_number or not (window and limit and param and cost)
  or window < 1000 or window > 1e15 or limit < 1 or limit > 1e9 or param < 0 or param > 1e9 or cost < 1 or cost > 1e9
  or window % 1 + limit % 1 + param % 1 + cost % 1 ~= 0 or validate(window, limit, param, cost) then
  if #KEYS ~= 1 then
    return redis.error_reply('ERR ginlimit: the ' .. alg_name .. ' script decides one rule: want 1 key, got ' .. #KEYS)
  end
  if ARGV[2] ~= alg_number then
    return redis.error_reply('ERR ginlimit: algorithm (ARGV[2]) must be ' .. alg_number .. ' (' .. alg_name .. ') for this script, got ' .. tostring(ARGV[2]))
  end
  -- rule.lua
  local err
  window, err = rule(1)
  if window then
    err = validate(window, limit, param, cost) or 'bad arguments'
  end
  return redis.error_reply('ERR ginlimit: ' .. err)
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
