-- The several-rule driver: decides one request under n >= 1 rules, of any
-- algorithms, atomically and all or nothing. Every rule checks the request;
-- only if every one admits it does every one record it; then every rule
-- reports. If any rule rejects it, none records anything (a report may still
-- delete data that has left its window, which changes no decision). Every
-- check only reads, so the first write of an admission is the first rule's
-- commit: see lua.go about maxmemory.
--
-- The generator (go generate ./lua) writes gen/several.lua and gen/peek.lua
-- from this file: at "-- @layout", the positions of the arguments and of
-- the reply from package lua's constants; at "-- prologue.lua",
-- prologue.lua, then local peek (false, or true in peek.lua, which the
-- algorithms read too), rule.lua, the files of the algorithms numbered as
-- lua.Numbered lists them, each section wrapped in a function
-- (<name>_check and so on), then lines that map each algorithm number in
-- ARGV to its four functions and list the numbers for error messages,
--
--   local algorithms = {
--     [0] = {sliding_log_validate, sliding_log_check, sliding_log_commit, sliding_log_report},
--     ...
--   }
--   local algorithm_numbers = '0 (sliding_log), 1 (sliding_counter), ...'
--
-- then the rest of this file. With peek true (lua.Peek), nothing is recorded: every
-- rule checks and reports, and fired says which rule would reject the
-- request, so the reply is what a request would be told, without counting
-- it. The arguments: KEYS[i] rule i's key (all in one Redis Cluster slot:
-- the caller's job), ARGV[ARG_CLOCK] the test clock or '' (prologue.lua),
-- then ARGS_PER_RULE per rule from ARG_RULES: rule i's algorithm number,
-- window, limit, param and cost (at ARG_ALGORITHM ... ARG_COST past its
-- first), each checked with rule.lua's bad and the algorithm's validate.
--
-- Returns {now_us, fired, then per rule: ok, remaining, reset_us,
-- retry_us}, at the positions REPLY_* of the layout, packed as lua.go says: fired is the index of the first rule
-- that rejected the request, 0 when it was admitted and recorded; ok is 1
-- when that rule alone would admit it; retry_us is 0 for a rule that would.

-- @layout

if #KEYS < 1 or #ARGV ~= ARG_RULES - 1 + ARGS_PER_RULE * #KEYS then
  return redis.error_reply('ERR ginlimit: want ' .. (ARG_RULES - 1) .. ' + ' .. ARGS_PER_RULE .. '*#KEYS arguments (the clock, then algorithm, window, limit, param and cost per key) and at least 1 key; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
-- prologue.lua

local n = #KEYS
local algs, keys, windows, limits, params, costs = {}, {}, {}, {}, {}, {}
for i = 1, n do
  local a = ARG_RULES + ARGS_PER_RULE * (i - 1) -- rule i's first argument
  local number = int(ARGV[a + ARG_ALGORITHM], 0, 1e9)
  local alg = number and algorithms[number]
  if not alg then
    return redis.error_reply('ERR ginlimit: rule ' .. i .. ': algorithm (ARGV[' .. (a + ARG_ALGORITHM) .. ']) must be one of '
      .. algorithm_numbers .. ', got ' .. tostring(ARGV[a + ARG_ALGORITHM]))
  end
  local window, limit, param, cost = tonumber(ARGV[a + ARG_WINDOW]), tonumber(ARGV[a + ARG_LIMIT]), tonumber(ARGV[a + ARG_PARAM]), tonumber(ARGV[a + ARG_COST])
  local at, name, must = bad(window, limit, param, cost)
  if at then
    -- bad numbers the four as they come: window, limit, param, cost.
    at = ({ARG_WINDOW, ARG_LIMIT, ARG_PARAM, ARG_COST})[at]
    return redis.error_reply('ERR ginlimit: rule ' .. i .. ': ' .. name .. ' (ARGV[' .. (a + at) .. ']) must be ' .. must)
  end
  local err = alg[1](window, limit, param, cost)
  if err then
    return redis.error_reply('ERR ginlimit: rule ' .. i .. ': ' .. err)
  end
  algs[i], keys[i], windows[i], limits[i], params[i], costs[i] = alg, KEYS[i], window, limit, param, cost
end

local fired = 0
local oks, as, bs = {}, {}, {}
for i = 1, n do
  oks[i], as[i], bs[i] = algs[i][2](keys[i], windows[i], limits[i], params[i], costs[i])
  if fired == 0 and not oks[i] then
    fired = i
  end
end

local admitted = fired == 0 and not peek
if admitted then
  for i = 1, n do
    as[i], bs[i] = algs[i][3](keys[i], windows[i], limits[i], params[i], costs[i], as[i], bs[i])
  end
end

local out = {}
out[REPLY_NOW], out[REPLY_FIRED] = now, fired
for i = 1, n do
  local remaining, reset, retry = algs[i][4](keys[i], windows[i], limits[i], params[i], costs[i], oks[i], admitted, as[i], bs[i])
  local j = REPLY_HEAD + REPLY_PER_RULE * (i - 1) + 1 -- rule i's first integer
  out[j + REPLY_OK], out[j + REPLY_REMAINING], out[j + REPLY_RESET], out[j + REPLY_RETRY] = oks[i] and 1 or 0, remaining, reset, retry
end
return pack('>' .. string.rep('i8', #out), unpack(out))
