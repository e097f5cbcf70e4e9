-- limits_version.lua: the safety net of the overrides' notices.
--
-- KEYS[1] the overrides' version (ginlimit.LimitsKey .. ":version"); ARGV[1]
-- the instance's own echo channel.
--
-- Reply: {version}, 0 when there is none. It echoes as beat.lua does.
redis.call('PUBLISH', ARGV[1], 'echo')
return {tonumber(redis.call('GET', KEYS[1]) or '0')}
