-- The single-rule driver: decides one request under one rule, atomically,
-- in one call. It is the hot path, so it does nothing but that.
--
-- lua.go builds the script as prologue.lua, the rule's algorithm's file,
-- then a generated line that names the algorithm's table, its number in
-- ARGV[2] and its name,
--
--   local alg, alg_number, alg_name = sliding_log, 0, 'sliding_log'
--
-- then this file. The arguments are prologue.lua's with exactly one key:
-- KEYS[1] the key, ARGV[1] the test clock or '', ARGV[2..6] the algorithm
-- number (which must be alg_number), window, limit, param and cost.
--
-- Returns {now_us, fired, ok, remaining, reset_us, retry_us}: fired is 1
-- when the request was rejected and 0 when it was admitted and recorded; ok
-- is 1 when it was admitted; the other three are the algorithm's report.

if #KEYS ~= 1 then
  return redis.error_reply('ERR ginlimit: the ' .. alg_name .. ' script decides one rule: want 1 key, got ' .. #KEYS)
end
if tonumber(ARGV[2]) ~= alg_number then
  return redis.error_reply('ERR ginlimit: algorithm (ARGV[2]) must be ' .. alg_number .. ' (' .. alg_name .. ') for this script, got ' .. tostring(ARGV[2]))
end
local r, err = rule(1)
if r then
  err = alg.validate(r)
end
if err then
  return redis.error_reply('ERR ginlimit: ' .. err)
end

alg.check(r)
local ok = r.ok
r.admitted = ok
if ok then
  alg.commit(r)
end
alg.report(r)
if ok then
  return {now, 0, 1, r.remaining, r.reset, r.retry}
end
return {now, 1, 0, r.remaining, r.reset, r.retry}
