-- set_limit.lua: sets or clears one override.
--
-- KEYS[1] the hash of the overrides (ginlimit.LimitsKey), KEYS[2] its
-- version, in the same slot. ARGV[1] the override's field; ARGV[2] its
-- value "limit window_us", or "" to clear it; ARGV[3] the quota of its
-- kind; ARGV[4] the new version; ARGV[5] "1" for a rule's or a plan's
-- override (fields ending in " *"), "0" for an identity's.
--
-- A new field past ARGV[3] fields of its kind is refused ({-1}). The
-- fields are counted only when the hash holds that many of both kinds
-- together, so that below the quota a change costs O(1); at it, one pass
-- over the field names. Reply: {0}, or {-1}.
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  local max = tonumber(ARGV[3])
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= max then
    local rule, n = ARGV[5] == '1', 0
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      if (string.sub(f, -2) == ' *') == rule then n = n + 1 end
    end
    if n >= max then return {-1} end
  end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('SET', KEYS[2], ARGV[4])
return {0}
