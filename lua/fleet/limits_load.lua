-- limits_load.lua: the overrides, read whole.
--
-- KEYS[1] the hash of the overrides (ginlimit.LimitsKey), KEYS[2] its
-- version.
--
-- Reply: an array of strings, the version first ("0" when there is none),
-- then the hash's fields and values in turn, as HGETALL gives them.
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, redis.call('GET', KEYS[2]) or '0')
return out
