-- In-flight limits: at most limit requests hold a slot of a key at once,
-- over every instance. A script of its own, not an algorithm of the
-- drivers: a slot is taken before the handler runs and given back when it
-- returns, so it needs three operations, not one decision.
--
-- Key    a ZSET with one entry per slot held: the member is the holder's
--        unique id (random bytes made by the caller), the score the end of
--        its lease in µs on the Redis clock. A lease whose end is at or
--        before now has lapsed: its slot is free, whether or not the entry
--        has been removed yet (a holder that died never releases). The key
--        expires a second after its last lease ends (PEXPIRE, only ever
--        raised), so an idle key goes away by itself. The second is slack:
--        with a TTL of exactly the lease (1 ms for the shortest), a Redis
--        stalled for that long inside the command (a loaded machine) could
--        expire the key, fresh lease and all, before anyone read it.
--
-- KEYS[i]           slot key i (n >= 1 keys, all in one cluster slot)
-- ARGV[1]           a test clock in µs (an integer, 0 to 2^53), or '' for
--                   Redis TIME
-- ARGV[2]           the operation: 'acquire', 'release', 'renew' or 'peek'
-- ARGV[3]           the holder's id (1 to 64 bytes)
-- ARGV[4 + 2(i-1)]  key i's limit (an integer, 1 to 1e6)
-- ARGV[5 + 2(i-1)]  key i's lease in µs (an integer, 1000 to 3.6e9)
--
-- so #ARGV is 3 + 2*#KEYS. Replies:
--
--   acquire  {now_us, fired, in_use_1, ..., in_use_n}: fired is the 1-based
--            index of the first key whose live leases already fill its
--            limit (nothing is written), 0 when the holder took a slot of
--            every key, leased until now + lease; in_use_i is key i's live
--            leases, the holder's included when admitted.
--   peek     acquire's reply, recording nothing (in_use without the holder).
--   release  {ended}: the number of keys whose live lease of the holder it
--            removed (a lapsed one is removed too, but not counted).
--   renew    {renewed}: the number of keys whose lease of the holder was
--            live and now ends at now + lease; a lapsed lease is removed,
--            not renewed (its slot may already be someone else's).
--
-- acquire only reads (ZCOUNT) before its first write, a ZADD, which Redis
-- refuses before anything is written when it is out of memory (maxmemory);
-- the removal of lapsed entries comes after it, or alone on a refusal (a
-- deletion, which Redis allows then). renew's first write is also a ZADD.

local n = #KEYS
if n < 1 or #ARGV ~= 3 + 2 * n then
  return redis.error_reply('ERR ginlimit: in-flight: want 3 + 2*#KEYS arguments (the clock, the operation, the holder, then limit and lease per key) and at least 1 key; got '
    .. n .. ' keys and ' .. #ARGV .. ' arguments')
end

local op, holder = ARGV[2], ARGV[3]
if op ~= 'acquire' and op ~= 'release' and op ~= 'renew' and op ~= 'peek' then
  return redis.error_reply("ERR ginlimit: in-flight: the operation (ARGV[2]) must be 'acquire', 'release', 'renew' or 'peek', got " .. tostring(op))
end
if #holder < 1 or #holder > 64 then
  return redis.error_reply('ERR ginlimit: in-flight: the holder (ARGV[3]) must be 1 to 64 bytes')
end

local limits, leases = {}, {}
for i = 1, n do
  local limit, lease = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  if not limit or limit < 1 or limit > 1e6 or limit % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: in-flight: limit (ARGV[' .. (2 + 2 * i) .. ']) must be an integer from 1 to 1e6')
  end
  if not lease or lease < 1000 or lease > 3.6e9 or lease % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: in-flight: lease (ARGV[' .. (3 + 2 * i) .. ']) must be an integer number of microseconds from 1000 to 3.6e9')
  end
  limits[i], leases[i] = limit, lease
end

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  if not now or now < 0 or now > 9007199254740992 or now % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: in-flight: the test clock (ARGV[1]) must be an integer number of microseconds from 0 to 2^53, or empty for the Redis clock')
  end
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- lease sets the holder's lease on key i to end at now + lease and makes
-- sure the key outlives it.
local function lease(i, flag)
  local key, ms = KEYS[i], math.ceil(leases[i] / 1000) + 1000
  if flag then
    redis.call('ZADD', key, flag, now + leases[i], holder)
  else
    redis.call('ZADD', key, now + leases[i], holder)
  end
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, string.format('%d', ms))
  end
end

if op == 'release' then
  local ended = 0
  for i = 1, n do
    local score = redis.call('ZSCORE', KEYS[i], holder)
    if score then
      redis.call('ZREM', KEYS[i], holder)
      if tonumber(score) > now then
        ended = ended + 1
      end
    end
  end
  return {ended}
end

if op == 'renew' then
  local renewed = 0
  for i = 1, n do
    local score = redis.call('ZSCORE', KEYS[i], holder)
    if score and tonumber(score) > now then
      lease(i, 'XX')
      renewed = renewed + 1
    elseif score then
      redis.call('ZREM', KEYS[i], holder)
    end
  end
  return {renewed}
end

local reply = {now, 0}
for i = 1, n do
  local live = redis.call('ZCOUNT', KEYS[i], now + 1, '+inf')
  reply[2 + i] = live
  if reply[2] == 0 and live >= limits[i] then
    reply[2] = i
  end
end
if op == 'acquire' and reply[2] == 0 then
  for i = 1, n do
    lease(i)
    reply[2 + i] = reply[2 + i] + 1
  end
end
if op == 'acquire' then
  for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  end
end
return reply
