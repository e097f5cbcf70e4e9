-- Exact sliding log, weighted.
--
-- The window is (now - window, now]: an entry whose score is exactly
-- now - window has left it. A request is admitted only while the units
-- inside the window plus its cost fit in the limit; an admitted request is
-- recorded as one entry, whatever its cost, and a rejected one not at all.
-- A decision is O(log n) in the entries of the key (a rejection whose cost
-- needs more than the oldest entry to leave, O(log^2 n)), whatever the cost.
--
-- Key    a ZSET with one entry per admitted request, scored by its
--        admission time in µs, at = max(now, the newest entry's at), so
--        that scores never decrease, even when the clock steps back (an
--        entry is then recorded later than now and stays longer, which only
--        rejects more). The member is 18 bytes, 25 when its units are exact
--        (for a cost of 1), or 22 for a cost other than 1: unsigned
--        big-endian integers
--          at     (7 bytes) the score again: the common path reads the newest
--                 member only, and a score read costs Redis a conversion of
--                 a double to text;
--          cum    (7 bytes) the units admitted on the key so far, this
--                 request's included. It strictly increases, so members are
--                 unique, and Redis orders the members of one score by their
--                 bytes, so by cum: the newest entry is the last, and all
--                 are in admission order;
--          units  (4 bytes) the units in the window ending at this admission,
--                 this request's included, or more (a bound: see param);
--          first  (7 bytes) only when units is exact (counted, or known
--                 from an exact newest entry): the at of the oldest entry
--                 in that window. While it has not left the window, nothing
--                 has, so units is still the units in the window: the
--                 newest entry alone decides, with one read, both an
--                 admission (whose entry is exact in turn when fewer than
--                 exact-below units remain, and a bound otherwise) and a
--                 rejection that needs one unit to leave (the oldest
--                 entry's leaving frees one); an older instance reads the
--                 member's first 18 bytes, as before;
--          cost   (4 bytes) only when it is not 1.
--        The units in the window are cum(newest) - cum(oldest in the
--        window) + cost(oldest in the window), from two reads. cum goes back
--        by 2^51 when it reaches 2^52 (so that it stays exact, below 2^53),
--        never between two entries of one score; differences of cum are
--        taken modulo 2^51. Entries that have left the window count for
--        nothing; they are removed after each exact count of an admission
--        (so at least once per limit - exact-below units admitted), after an
--        admission that finds the window empty, after a 16th of the
--        admissions (now % 16 == 0), and by a request that another rule
--        rejects or a 16th of the rejections. The key expires a window after
--        its newest entry, or up to a quarter of a window later: its first
--        entry sets exactly a window; the others set the end of the quarter
--        of a window (aligned on the clock) they come in plus a window, and
--        only when that quarter is not the newest entry's, or the newest
--        entry was the key's first.
-- param  exact-below (an integer, at least 0): remaining and reset are
--        exact when the request is rejected or fewer than this many units
--        remain; otherwise remaining is a lower bound and reset the window,
--        an upper bound. The newest entry's units plus the units admitted
--        since bound the units in the window while the clock is not behind
--        the newest entry: while that bound leaves at least exact-below
--        units after the request, it is admitted on the newest entry alone,
--        with one read. Otherwise, and on a 16th of the calls
--        (now % 16 == 0) to keep the bound close, the units are counted
--        exactly, unless the newest entry's are exact (first).
-- cost   1 to the limit.
-- State  (the sections' a and b) from check: a = cum + 1 (negated when the key's TTL already covers
--        the request; nil for an empty key) and b = the bound (a number), or
--        0 when the window is empty, or, counted exactly, the reply with the
--        oldest entry in the window rewritten as {the units in the window,
--        its at, the newest entry's at when commit needs it}, or, from an
--        exact newest entry, {its units, its first, nil, true}; for a
--        rejection, a = the time its retry ends, and b as above or, decided
--        on the newest entry alone, its units (a number). From commit: the
--        units in the window with the request, and the oldest entry's at
--        when they are exact.
--
-- remaining is the limit minus the units in the window (at least 0: after
-- the clock stepped back, entries newer than now count too, and can
-- together exceed the limit); reset is the time until the oldest entry in
-- the window leaves it, the first moment remaining can grow (see param); and
-- retry, for a rejected request, the time until the entry that holds the
-- (units + cost - limit)th unit of the window, counted from the oldest, has
-- left: the moment the request first fits (found by a binary search over
-- the ranks of the window, or at once when it is the oldest entry, as it
-- always is for a cost of 1).
--
-- check only reads, so that the first write of an admission is its ZADD,
-- which Redis refuses before anything is written when it is out of memory
-- (maxmemory); the sweeps come after it, or in report when nothing is
-- written (a deletion, which Redis allows then).
--
-- A member whose first byte is a digit was written by the format before
-- this one (an entry per unit, named after its time) and counts as one unit:
-- while one is the newest entry, the units in the window are counted
-- (ZCOUNT); while one is the oldest in the window, the count is the newest
-- entry's cum, which started at those units: all the units since, an upper
-- bound, until the old entries have left the window.

-- The exact count, given the newest entry's cum: the reply with the oldest
-- entry in the window, rewritten as {the units in the window, its at}, or 0
-- when the window is empty; and the time (µs) when the entry holding the
-- kth unit of the window, counted from the oldest, has left, where
-- k = units - over is what must leave before the request fits: the at of
-- the first entry whose cum reaches cum(oldest) - cost(oldest) + k, found by
-- a binary search over the ranks of the window, counted from the newest
-- (-1), unless it is the oldest. Only the uncommon paths come here.
local function sliding_log_exact(key, window, cum, over)
  -- Scores are whole µs, so (now - window, +inf] is [now - window + 1, +inf]:
  -- a number, which Redis reads as a double (exactly: below 2^53).
  local from = now - window + 1
  -- The oldest entry is in the window unless a sweep is due: read it by
  -- rank, which costs Redis less than by score, and by score only when it
  -- has left the window (or is of the older format, whose score is not in
  -- the member).
  local first = redis.call('ZRANGE', key, '0', '0')
  local f = first[1]
  if not f then
    return 0
  end
  local at, fcum, fcost, units
  if string.byte(f) < 48 then
    at, fcum = unpack_ints('>I7I7', f)
  end
  if not at or at < from then
    first = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'LIMIT', '0', '1')
    f = first[1]
    if not f then
      return 0
    end
    at = nil
    if string.byte(f) < 48 then
      at, fcum = unpack_ints('>I7I7', f)
    end
  end
  if at then
    fcost = 1
    if #f == 22 then
      fcost = unpack_ints('>I4', f, 19)
    end
    units = cum - fcum + fcost
    if units < 0 then
      units = units + 2251799813685248
    end
  else
    -- The older format: count from the first entry in this one.
    at = tonumber(redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')[2])
    fcum, fcost, units = 1, 1, cum
  end
  first[1], first[2] = units, at
  local k = units - over
  if k <= fcost then
    return first, at + window
  end
  -- A binary search, for a cost that needs more than the oldest entry to
  -- leave.
  local base = fcum - fcost
  local lo = -redis.call('ZCOUNT', key, from, '+inf')
  local hi = -1
  at = nil
  -- The entry at lo holds fewer than k units from base, the one at hi k
  -- (the newest: units >= k).
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    local r = string.format('%d', mid)
    local e = redis.call('ZRANGE', key, r, r)[1]
    local eat, ecum, d = nil, nil, 0
    if string.byte(e) < 48 then
      eat, ecum = unpack_ints('>I7I7', e)
      d = ecum - base
      if d < 0 then
        d = d + 2251799813685248
      end
    end
    if d >= k then
      hi, at = mid, eat
    else
      lo = mid
    end
  end
  if not at then
    at = tonumber(redis.call('ZREVRANGE', key, '0', '0', 'WITHSCORES')[2])
  end
  return first, at + window
end

-- @validate
if cost > limit then
  invalid = 'cost must be at most the limit'
end

-- @check
local newest = redis.call('ZREVRANGE', key, '0', '0')
local m = newest[1]
if not m then
  ok, a, b = true, nil, 0
  break
end
local last, cum, units, first
if string.byte(m) < 48 then
  if #m == 25 then
    last, cum, units, first = unpack_ints('>I7I7I4I7', m)
  else
    last, cum, units = unpack_ints('>I7I7I4', m)
  end
else
  -- The older format.
  last = tonumber(redis.call('ZREVRANGE', key, '0', '0', 'WITHSCORES')[2])
  units = redis.call('ZCOUNT', key, now - window + 1, '+inf')
  cum = units
end
-- a, for commit: cum + 1, negated when the key's TTL already covers this
-- request: when it comes in the newest entry's quarter of a window,
-- unless that entry was the key's first (the only one whose cum is its
-- cost).
a = cum + 1
local q = window / 4
if now - now % q == last - last % q then
  local c = 1
  if #m == 22 then
    c = unpack_ints('>I4', m, 19)
  end
  if cum ~= c then
    a = -a
  end
end
if last <= now and cum < 4503599627370496 - cost then
  if first and first > now - window then
    -- The newest entry's units are exact and nothing has left the window
    -- since (its oldest entry, at first, is still in it): they are the
    -- units in the window now. Far from the limit, the admission is
    -- recorded as on the common path (a bound: no table, a shorter
    -- entry); near it, exactly, so that the next decision can be taken
    -- on it alone too.
    if units + cost <= limit - param then
      ok, b = true, units
      break
    end
    if units + cost <= limit then
      ok, b = true, {units, first, nil, true}
      break
    end
    if units + cost - limit == 1 then
      -- One unit must leave: the oldest entry's leaving frees it.
      ok, a, b = false, first + window, units
      break
    end
  elseif last <= now - window then
    -- Everything has left the window.
    ok, b = true, 0
    break
  elseif units + cost <= limit - param and now % 16 ~= 0 then
    -- The common path.
    ok, b = true, units
    break
  end
end
local found, retry_at = sliding_log_exact(key, window, cum, limit - cost)
if found == 0 then
  ok, b = true, 0
  break
end
if found[1] + cost > limit then
  ok, a, b = false, retry_at, found
  break
end
if last > now or cum >= 4503599627370496 - cost then
  found[3] = last
end
ok, b = true, found

-- @commit
local cum, units, at, last, first = 0, b, now, nil, nil
if a then
  cum = a - 1
  if a < 0 then
    cum = -a - 1
  end
end
local exact = type(b) == 'table'
if exact then
  units, first, last = b[1], b[2], b[3]
  if last and last > now then
    at = last
  end
elseif b == 0 then
  -- The window is empty: this entry is its oldest.
  first = at
end
units, cum = units + cost, cum + cost
if cum >= 4503599627370496 and (b == 0 or last and at > last) then
  cum = cum - 2251799813685248
end
-- The member, as bytes: at (7), cum (7), units (4), then first (7) when
-- the units are exact, or cost (4) when it is not 1.
local m
if cost ~= 1 then
  m = pack('>I7I7I4I4', at, cum, units, cost)
elseif first then
  m = pack('>I7I7I4I7', at, cum, units, first)
else
  m = pack('>I7I7I4', at, cum, units)
end
redis.call('ZADD', key, string.format('%d', at), m)
-- Sweep when the units were counted exactly (so at least once per
-- limit - exact-below units admitted) or all had left the window, and on
-- a 16th of the admissions; not when the newest entry showed that
-- nothing has left (b[4]).
if exact and not b[4] or (a and b == 0) or now % 16 == 0 then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
end
if not a then
  redis.call('PEXPIRE', key, string.format('%d', math.ceil(window / 1000)))
elseif a > 0 then
  local q = window / 4
  redis.call('PEXPIRE', key, string.format('%d', math.ceil((at - at % q + q + window - now) / 1000)))
end
-- For report: the units in the window with the request, and the oldest
-- entry's at when they are exact.
a, b = units, nil
if exact then
  b = first
end

-- @report
if admitted then
  remaining, reset, retry = limit - a, window, 0
  if b and limit - a < param then
    reset = b + window - now
  end
  break
end
if a and (ok or now % 16 == 0) then
  -- Nothing was written: sweep the entries that have left the window
  -- (not a write Redis refuses when it is out of memory), when another
  -- rule rejected the request, and on a 16th of the rejections.
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
end
if b == 0 then
  remaining, reset, retry = limit, window, 0
  break
end
if not ok and type(b) ~= 'table' then
  -- Rejected on the newest entry alone: b is the units in the window,
  -- and a, when its oldest entry leaves.
  remaining, reset, retry = math.max(0, limit - b), a - now, a - now
  break
end
if type(b) ~= 'table' then
  -- Another rule rejected a request that this one admits on the bound:
  -- count exactly, as for a rejection.
  b = sliding_log_exact(key, window, math.abs(a) - 1, math.huge)
  if b == 0 then
    remaining, reset, retry = limit, window, 0
    break
  end
end
remaining, reset, retry = math.max(0, limit - b[1]), b[2] + window - now, 0
if not ok then
  retry = a - now
end
