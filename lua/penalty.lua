-- Penalty: bans an identity from a rule after too many rejections.
--
-- It is never a rule alone: ginlimit puts it in the same call as the rule
-- it guards, on a key in the same slot, before it. Its check refuses while
-- the identity is banned, or when the strikes the caller brings (refusals
-- it answered itself) make the ban, which then refuses this very request;
-- it records nothing else when the request is admitted; its report counts
-- strikes when the request was refused (by the rule it guards, or by
-- another) and starts a ban once they reach the limit within the window. A
-- request whose own refusal makes the ban was refused by the other rule;
-- the report says it is banned, and the ban refuses from the next one.
--
-- Key    a hash: b = the ban's end (µs), s = the strikes in the current
--        strike window, t = that window's start (µs). The key expires when
--        the ban ends, or when the strike window does.
-- window the period strikes are counted over (µs): a window starts at the
--        first strike after the last one ended.
-- limit  the strikes that make a ban.
-- param  the ban's length in ms (at least 1).
-- cost   the strikes this call brings: 1 for the request when it is
--        refused, plus the refusals the caller answered itself since its last
--        call (its deny cache, or an in-flight limit's refusals), so cost - 1
--        when the request is admitted. Those cost - 1 count before the
--        request is judged: when they reach the limit, check starts the ban
--        and the request is the first one it refuses.
-- State  from check: for a banned identity (ok false), the ban's end, and
--        b = -1 when this call's strikes start the ban (report writes it);
--        otherwise the strikes and the strike window's start (nil when
--        none).
--
-- remaining is 1e9 while the identity is not banned (no quota: a ban is the
-- only thing this rule refuses for, and a deny cache must not ration calls
-- by strikes), 0 while it is, from the request that made the ban on; reset
-- and retry are then the time the ban has left.
--
-- Its writes are in report, for a refused request (or a ban the carried
-- strikes start), and go through pcall:
-- when Redis is out of memory the strike is lost, never the decision (see
-- lua.go about maxmemory). With peek (lua.Peek) nothing is written.

-- @validate
if param < 1 then
  invalid = 'ban length (param) must be at least 1 ms'
end

-- @check
local st = redis.call('HMGET', key, 'b', 's', 't')
local ends = tonumber(st[1])
if ends and ends > now then
  ok, a, b = false, ends, nil
  break
end
ok, a, b = true, tonumber(st[2]) or 0, tonumber(st[3])
if cost > 1 and not peek then
  -- The strikes the caller brings (cost - 1) count before the request is
  -- judged: when they make the ban, this request is the first it refuses
  -- (b = -1 tells report to write the ban).
  local strikes, start = a, b
  if not start or start > now or now - start >= window then
    strikes = 0
  end
  if strikes + cost - 1 >= limit then
    ok, a, b = false, now + param * 1000, -1
    break
  end
end

-- @commit
-- Nothing: a penalty writes only in its report.

-- @report
if not ok then
  if b == -1 then
    pcall(redis.call, 'HSET', key, 'b', string.format('%d', a), 's', '0', 't', string.format('%d', now))
    pcall(redis.call, 'PEXPIRE', key, param .. '')
  end
  remaining, reset, retry = 0, a - now, a - now
  break
end
local add = cost
if admitted then
  add = cost - 1
end
if peek or add <= 0 then
  remaining, reset, retry = 1e9, 0, 0
  break
end
local strikes, start = a, b
if not start or start > now or now - start >= window then
  strikes, start = 0, now
end
strikes = strikes + add
if strikes >= limit then
  pcall(redis.call, 'HSET', key, 'b', string.format('%d', now + param * 1000), 's', '0', 't', string.format('%d', now))
  pcall(redis.call, 'PEXPIRE', key, param .. '')
  remaining, reset, retry = 0, param * 1000, param * 1000
  break
end
pcall(redis.call, 'HSET', key, 's', strikes .. '', 't', string.format('%d', start))
pcall(redis.call, 'PEXPIRE', key, math.ceil((start + window - now) / 1000) .. '')
remaining, reset, retry = 1e9, 0, 0
