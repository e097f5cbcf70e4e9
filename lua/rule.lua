-- rule.lua: int and bad, the checks of one rule's settings that name what
-- is wrong. The generator puts this file after prologue.lua in the
-- several-rule scripts, which check every rule with it, and inside the
-- single-rule scripts' error branch, so that the hot path does not make
-- these functions.
--
-- int(v, lo, hi) is v (a number, or a string of one) as an integer from lo
-- to hi, or nil. bad(window, limit, param, cost) returns nil when the four
-- are in the ranges every algorithm takes, or the position of the first
-- that is not (1 to 4, in that order) and what it must be. An algorithm's
-- own checks are its validate.

local function int(v, lo, hi)
  v = tonumber(v)
  if not v or v < lo or v > hi or v % 1 ~= 0 then
    return nil
  end
  return v
end

local function bad(window, limit, param, cost)
  if not int(window, 1000, 1e15) then
    return 1, 'window', 'an integer number of microseconds from 1000 to 1e15'
  end
  if not int(limit, 1, 1e9) then
    return 2, 'limit', 'an integer from 1 to 1e9'
  end
  if not int(param, 0, 1e9) then
    return 3, 'param', 'an integer from 0 to 1e9'
  end
  if not int(cost, 1, 1e9) then
    return 4, 'cost', 'an integer from 1 to 1e9'
  end
end
