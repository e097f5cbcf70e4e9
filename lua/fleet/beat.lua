-- beat.lua: one instance's heartbeat, the upkeep of its presence.
--
-- KEYS[1] the sorted set of the instances (ginlimit.InstancesKey); ARGV[1]
-- the instance's random id, ARGV[2] its time to live in ms, ARGV[3] the
-- channel of notices (ginlimit.ResetChannel), ARGV[4] the instance's own
-- echo channel.
--
-- It renews the id for ARGV[2] ms on Redis's clock and drops the ids
-- expired. An id that was not there (a new instance, or one whose id
-- expired during an outage) is announced on ARGV[3] as "join <count>", so
-- that every instance counts it at once. It publishes on the echo channel,
-- which only the instance's own subscription hears: the echo tells it that
-- its subscription still receives, without a call of its own.
--
-- Reply: {count}.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local added = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local n = redis.call('ZCARD', KEYS[1])
if added == 1 then
  redis.call('PUBLISH', ARGV[3], 'join ' .. n)
end
redis.call('PUBLISH', ARGV[4], 'echo')
return {n}
