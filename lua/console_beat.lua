-- console_beat.lua: one instance's beat of ginlimit/console, every 5 s:
-- it adds what the instance saw since its last beat to the fleet's
-- counts, and reads back the fleet's, in one call.
--
-- KEYS[1] the traffic hash of this beat's 5-second bucket ("<route>\n<rule>\n<outcome>" -> count)
-- KEYS[2] the refused zset of that bucket ("<route>\n<rule>\n<identity>" scored by refusals)
-- KEYS[3] the bans zset ("<route>\n<rule>\n<identity>" scored by the ban's end, Unix ms)
-- KEYS[4] the routes zset ("<policy>\n<rule>\n<route>" scored by when last served, Unix ms)
-- KEYS[5..] pairs of a bucket's traffic hash and refused zset to read back
-- ARGV[1] the buckets' time to live in seconds
-- ARGV[2] how many members a refused zset keeps (the most refused)
-- ARGV[3] now, Unix ms: bans that ended before it are dropped
-- ARGV[4] how many traffic pairs follow ARGV[6]; ARGV[5] how many refused pairs; then
-- ARGV[6] how many ban pairs; ARGV[7] how many routes; ARGV[8] how many routes the zset keeps;
-- then the traffic, refused and ban pairs (member, number), then the routes this instance served
--
-- Every key shares the hash tag {ginlimit:console}, so on a Redis Cluster
-- they are one slot. Replies {bans, routes, then per pair read: traffic, refused}.
local ttl, keep, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local nt, nr, nb = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local nro, keepRoutes = tonumber(ARGV[7]), tonumber(ARGV[8])
local i = 9
for _ = 1, nt do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
if nt > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
for _ = 1, nr do
  redis.call('ZINCRBY', KEYS[2], ARGV[i + 1], ARGV[i])
  i = i + 2
end
if nr > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -keep - 1)
  redis.call('EXPIRE', KEYS[2], ttl)
end
for _ = 1, nb do
  redis.call('ZADD', KEYS[3], 'GT', ARGV[i + 1], ARGV[i])
  i = i + 2
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -keep - 1)
for _ = 1, nro do
  redis.call('ZADD', KEYS[4], now, ARGV[i])
  i = i + 1
end
if nro > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - ttl * 1000)
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -keepRoutes - 1)
  redis.call('EXPIRE', KEYS[4], ttl)
end
local out = {redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'), redis.call('ZRANGE', KEYS[4], 0, -1)}
for k = 5, #KEYS, 2 do
  out[#out + 1] = redis.call('HGETALL', KEYS[k])
  out[#out + 1] = redis.call('ZRANGE', KEYS[k + 1], 0, keep - 1, 'REV', 'WITHSCORES')
end
return out
