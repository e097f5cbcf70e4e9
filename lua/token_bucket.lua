-- Token bucket in its single-timestamp form, GCRA, in exact integer
-- arithmetic.
--
-- The bucket holds up to burst tokens and refills at limit tokens per
-- window: one token every T = window/limit µs. GCRA keeps how far the
-- theoretical arrival time (TAT) is ahead of now; a request of cost n
-- conforms when ahead + n*T <= burst*T. To stay exact, every time is kept in
-- units of 1/limit µs, where T is exactly `window` and the capacity exactly
-- burst*window (which must not exceed 2^53).
--
-- Key    a string of 21 bytes, unsigned big-endian integers of 7 bytes:
--        base, the µs time of the last admission; how far the TAT was then
--        ahead of it, in 1/limit µs; and the µs time until which the key's
--        TTL lasts. The key expires when the bucket is full again, or up to
--        a quarter of the time it takes to fill from empty later: an
--        admission sets the TTL that far (SET ... PX) only when the one the
--        key has ends before the bucket would be full again, with a
--        millisecond to spare; otherwise it rewrites the first 14 bytes and
--        keeps the TTL (SETRANGE).
-- param  the burst: the bucket's capacity (an integer, at least 1, with
--        burst*window at most 2^53).
-- cost   1 to the burst.
-- State  a = ahead (now, in 1/limit µs; -ahead - 1 when the key's TTL
--        already lasts long enough for this request) and b = new_ahead
--        (what it would be with this request).
--
-- remaining is the whole tokens left, reset the time until the next whole
-- token, and retry, for a rejected request, the time until its cost fits,
-- both rounded up to whole microseconds.
--
-- check only reads, so the first write of an admission is its SET or
-- SETRANGE, which Redis refuses before anything is written when it is out
-- of memory.
--
-- When the clock steps back, the stored TAT stays where it was, so it is
-- further ahead of now (possibly more than the capacity: remaining is then
-- 0), and nothing more is admitted than without the step; reset and retry
-- count to that TAT.
--
-- A key that does not hold 21 bytes was written by the format before this
-- one, "<base>:<ahead>" in decimal (expiring when the bucket is full again):
-- check reads it, and an admission replaces it with the current format.

-- @validate
if param < 1 then
  invalid = 'burst (param) must be at least 1'
elseif cost > param then
  invalid = 'cost must be at most the burst (param)'
elseif param * window > 9007199254740992 then
  invalid = 'burst (param) * window must not exceed 2^53'
end

-- @check
local ahead, expires = 0, nil
local stored = redis.call('GET', key)
if stored then
  local base
  if #stored == 21 and string.byte(stored) < 48 then
    base, ahead, expires = unpack_ints('>I7I7I7', stored)
  else
    -- The older format.
    local sb, sa = string.match(stored, '^(%d+):(%d+)$')
    if sb then
      base, ahead = tonumber(sb), tonumber(sa)
    end
  end
  if base then
    -- Drain the elapsed µs, each worth limit units. The product is exact
    -- whenever it is below ahead (<= 2^53), and compares right when it
    -- is not. When the clock has stepped back, it is negative and the
    -- TAT stays where it was, further ahead of now: that only rejects
    -- more, and the reset and retry still say when a token is back.
    local drained = (now - base) * limit
    if drained >= ahead then
      ahead = 0
    else
      ahead = ahead - drained
    end
  end
end
ok, a, b = cost * window <= param * window - ahead, ahead, ahead + cost * window
-- The capacity is in 1/limit µs, like ahead. ahead is negated (-1) when
-- the key's TTL lasts until the bucket would be full again with this
-- request, with a millisecond to spare (Redis counts a TTL from the
-- start of the millisecond the call runs in).
if expires and now + b / limit + 1000 <= expires then
  a = -ahead - 1
end

-- @commit
if a < 0 then
  -- The TTL lasts: rewrite the time and how far ahead, and keep it.
  redis.call('SETRANGE', key, '0', pack('>I7I7', now, b))
  a = b
  break
end
-- Until the bucket is full again, and a quarter of the time it takes to
-- fill from empty (capacity / limit µs) more, so that the TTL is set
-- again at most about 4 times in that time.
local ms = math.ceil(b / limit / 1000) + math.floor(param * window / limit / 4000)
redis.call('SET', key, pack('>I7I7I7', now, b, now + ms * 1000), 'PX', string.format('%d', ms))
a = b

-- @report
local ahead = a
if ahead < 0 then
  ahead = -ahead - 1
end
local capacity = param * window
remaining = math.floor((capacity - ahead) / window)
if remaining < 0 then
  -- ahead exceeds the capacity only after the clock stepped back.
  remaining = 0
end
-- The next whole token: ahead must fall to capacity - (remaining+1)*window.
reset = math.ceil((ahead - (capacity - (remaining + 1) * window)) / limit)
retry = 0
if not admitted and not ok then
  retry = math.ceil((cost * window - (capacity - ahead)) / limit)
end
