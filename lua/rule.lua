-- rule.lua: int and rule, the checks of one rule's arguments that name
-- what is wrong. lua.go puts this file after prologue.lua in the
-- several-rule script, which runs rule for every rule, and inside the
-- single-rule script's error branch, so that the hot path does not make
-- these functions.
--
-- int(v, lo, hi) is v as an integer from lo to hi, or nil; rule(i) returns
-- rule i's window, limit, param and cost, checked against the ranges of
-- prologue.lua, or nil and what is wrong with its arguments. The algorithm
-- number, ARGV[5*i - 3], is the driver's to read.

local function int(v, lo, hi)
  v = tonumber(v)
  if not v or v < lo or v > hi or v % 1 ~= 0 then
    return nil
  end
  return v
end

local function rule(i)
  local a = 5 * i - 3
  local window = int(ARGV[a + 1], 1000, 1e15)
  if not window then
    return nil, 'window (ARGV[' .. (a + 1) .. ']) must be an integer number of microseconds from 1000 to 1e15'
  end
  local limit = int(ARGV[a + 2], 1, 1e9)
  if not limit then
    return nil, 'limit (ARGV[' .. (a + 2) .. ']) must be an integer from 1 to 1e9'
  end
  local param = int(ARGV[a + 3], 0, 1e9)
  if not param then
    return nil, 'param (ARGV[' .. (a + 3) .. ']) must be an integer from 0 to 1e9'
  end
  local cost = int(ARGV[a + 4], 1, 1e9)
  if not cost then
    return nil, 'cost (ARGV[' .. (a + 4) .. ']) must be an integer from 1 to 1e9'
  end
  return window, limit, param, cost
end
