-- leave.lua: takes the id ARGV[1] out of the sorted set of the instances
-- KEYS[1], when its Limiter closes. Reply: {removed}.
return {redis.call('ZREM', KEYS[1], ARGV[1])}
