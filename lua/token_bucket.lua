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
-- Key    a string of 32 bytes, unsigned big-endian integers: base (7
--        bytes), the µs time of the last admission; ahead (7), how far the
--        TAT was then ahead of it, in 1/limit µs; until (7), the µs time
--        until which the key's TTL lasts; and the limit (4) and window (7)
--        the state was written under. The key expires when the bucket is
--        full again, or up to a quarter of the time it takes to fill from
--        empty later: an admission sets the TTL that far (SET ... PX) only
--        when the one the key has ends before the bucket would be full
--        again, with a millisecond to spare; otherwise it rewrites the
--        first 14 bytes and keeps the TTL (SETRANGE).
-- param  the burst: the bucket's capacity (an integer, at least 1, with
--        burst*window at most 2^53).
-- cost   1 to the burst.
-- State  a = ahead (now, in 1/limit µs; -ahead - 1 when the key's TTL
--        already lasts long enough for this request) and b = new_ahead
--        (what it would be with this request), or, when the key must last
--        longer than its TTL for the bucket to be full again (see below),
--        minus the ms time it must last until.
--
-- ahead is tokens times the window whatever the limit (a token is window
-- units), so the state is the bucket's level, the tokens taken and not yet
-- back, and a new limit (an override's) reads it as it is: a cut keeps
-- what was spent, a raise gives the difference. A state written under
-- another limit or window is read as its level, converted to this window
-- (rounded up), and drained since its last admission at the lower of the
-- two rates, since when the change came is not known: so neither what the
-- old settings nor what the new ones would admit is ever exceeded. Its
-- admission rewrites it whole, under the new settings. Until then a
-- rejection keeps the key (PEXPIREAT, which Redis allows out of memory) as
-- long as the bucket takes to be full again: a TTL set for a faster rate
-- would otherwise end while tokens are still out, and the key come back
-- as a full bucket.
--
-- remaining is the whole tokens left, reset the time until the next whole
-- token, and retry, for a rejected request, the time until its cost fits,
-- both rounded up to whole microseconds, at this rule's rate.
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
-- (The formats before this one, 21 bytes without the settings and text
-- before that, are under other key names: ginlimit's keyTag.)

-- @validate
if param < 1 then
  invalid = 'burst (param) must be at least 1'
elseif cost > param then
  invalid = 'cost must be at most the burst (param)'
elseif param * window > 9007199254740992 then
  invalid = 'burst (param) * window must not exceed 2^53'
end

-- @check
local ahead, expires, keep = 0, nil, nil
local stored = redis.call('GET', key)
if stored and #stored == 32 then
  local base, l0, w0
  base, ahead, expires, l0, w0 = unpack_ints('>I7I7I7I4I7', stored)
  -- Drain the elapsed µs, each worth limit units. The product is exact
  -- whenever it is below ahead (<= 2^53), and compares right when it
  -- is not. When the clock has stepped back, it is negative and the
  -- TAT stays where it was, further ahead of now: that only rejects
  -- more, and the reset and retry still say when a token is back.
  local rate, changed = limit, l0 ~= limit or w0 ~= window
  if changed then
    -- Other settings: the level (ahead / w0 tokens) in this window's
    -- units, drained at the lower rate (units per µs: l0 * window / w0
    -- for the old one). Exact when only the limit changed.
    if w0 ~= window then
      ahead = math.min(math.ceil(ahead * window / w0), 9007199254740992)
    end
    if l0 * window < limit * w0 then
      rate = l0 * window / w0
    end
  end
  local drained = (now - base) * rate
  if drained >= ahead then
    ahead = 0
  else
    ahead = ahead - drained
  end
  if changed then
    ahead = math.ceil(ahead)
    -- The key must last until the bucket is full again at this rate; its
    -- TTL was set for the old settings. An admission writes it whole.
    local until_ms = math.ceil((now + ahead / rate) / 1000) + 1
    if ahead > 0 and until_ms * 1000 > expires then
      keep = until_ms
    end
    expires = nil
  end
end
ok, a, b = cost * window <= param * window - ahead, ahead, ahead + cost * window
-- The capacity is in 1/limit µs, like ahead. ahead is negated (-1) when
-- the key's TTL lasts until the bucket would be full again with this
-- request, with a millisecond to spare (Redis counts a TTL from the
-- start of the millisecond the call runs in).
if expires and now + b / limit + 1000 <= expires then
  a = -ahead - 1
elseif keep then
  b = -keep
end

-- @commit
if b < 0 then
  b = a + cost * window
end
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
redis.call('SET', key, pack('>I7I7I7I4I7', now, b, now + ms * 1000, limit, window), 'PX', string.format('%d', ms))
a = b

-- @report
if not admitted and not peek and b < 0 then
  -- Keep the key until the bucket is full again (see the top).
  redis.call('PEXPIREAT', key, string.format('%d', -b))
end
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
