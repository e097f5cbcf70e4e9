-- Exact sliding log, weighted, in one string.
--
-- The window is (now - window, now]. A request is admitted only while the
-- units inside the window plus its cost fit in the limit; an admitted
-- request of cost c is recorded as c entries, one per unit, and a rejected
-- one not at all. So a request fits exactly when the (limit - cost + 1)th
-- most recent unit has left the window, and remaining, reset and retry are
-- exact on every answer.
--
-- Times are kept to the millisecond: an admission at now (µs) is recorded
-- at ceil(now / 1000) ms, at = max(that, the newest entry's), so that
-- entries never go back in time, even when the clock does (an entry is then
-- recorded later than now and stays longer, which only rejects more). An
-- entry leaves the window when at * 1000 <= now - window: never sooner than
-- the µs of its admission would, and at most 1 ms later.
--
-- Key    a string: the body, one 4-byte entry per admitted unit (its at
--        minus the base, big-endian, oldest first), then a trailer of 63
--        bytes, big-endian:
--          base   (6) the ms the entries count from;
--          n      (4) the entries in the body;
--          tail   (4) the index of the oldest entry that was in the window
--                 when the key was last written; those before it are dead;
--          newest (4) the newest entry (its at minus the base);
--          lcum   (7) while the key the ZSET log kept may still hold
--                 admissions (see Upgrade), the cum of its newest member
--                 imported so far, else 0;
--          m      (1) how many entries q holds (8 at most);
--          qi     (1) which of them is tail's: those before it are dead;
--          first  (4) tail's entry, so that one unpack gives it;
--          q      (32) a copy of m entries of the body, tail's at qi, so
--                 that a decision that finds the oldest have left the
--                 window reads the next ones with the trailer.
--        A decision reads the trailer alone (GETRANGE with negative offsets,
--        which needs no length), and an admission writes its entries and the
--        new trailer with one SETRANGE where the old trailer was: the same
--        two calls as the fixed window's. Only when all of q has left does
--        a decision read the body: the next 8 entries, or a binary search
--        for the oldest entry in the window when those have all left too,
--        each a GETRANGE of the body. Memory follows what was admitted: 4
--        bytes per unit in the window, plus the dead ones, which an
--        admission drops (the body is rewritten with SET, its live part
--        only) when they reach a quarter of the live ones and at least 64,
--        or the base is 2^31 ms old (then every entry is rewritten from a
--        new base). An admission into an empty window rewrites the key
--        whole. The key expires a window after its newest entry, or up to a
--        quarter of a window later: the SET that writes it whole sets that;
--        SETRANGE keeps the expiry, and is followed by a PEXPIREAT only when
--        the admission comes in a quarter of a window (aligned on the clock)
--        later than the newest entry's.
-- param  the length of the key's prefix before its "sl2:" tag, so that the
--        script finds the key the ZSET log kept (the same name without the
--        tag); 0 when there is none.
-- cost   1 to the limit.
-- State  from check: a = nil and b = 0 when nothing is in the window (and
--        nothing is to be imported); on the common path a = the entries of
--        q that have left the window and b = the trailer as read; otherwise
--        b = a table of the fields (sliding_log_state) and a = nil.
--        From commit: a = the units in the window with the request and
--        b = the oldest one's at.
--
-- remaining is the limit minus the units in the window (at least 0: after
-- the clock stepped back, entries newer than now count too); reset is the
-- time until the oldest entry in the window leaves it, the first moment
-- remaining can grow; and retry, for a rejected request, the time until the
-- (units + cost - limit)th unit of the window, counted from the oldest, has
-- left: the moment the request first fits.
--
-- check only reads, so that the first write of an admission is its SET or
-- SETRANGE, which Redis refuses before anything is written when it is out
-- of memory (maxmemory).
--
-- Upgrade. The version before kept the log in a ZSET under the key without
-- the tag (its member: at in µs (7 bytes), cum (7), units (4), then first
-- (7) or cost (4), or, older still, a member whose first byte is a digit,
-- one unit named after its time). When this script finds no key of its
-- own, or its lcum says the older key may still be written by an instance
-- of the version before, it reads that key, and counts the entries in its
-- window that it has not imported yet (cum above lcum) as its own, at their
-- times (and no earlier than its newest entry); the next admission writes
-- them into this key. So during a rolling deploy an instance of this
-- version counts every admission of the older ones on the key it shares
-- with them; they do not count its own (they read only the ZSET), so for
-- the deploy's duration each older instance can admit up to the limit
-- more. lcum goes back to 0 once the older key is gone: it expires a window
-- after its last admission.

-- sliding_log_slow(op, key, window, param, s, cost, now, pack, unpack_ints)
-- holds every path but the common ones, in one function that takes what it
-- uses as arguments, so that a call makes one closure and no upvalue
-- (Redis runs a script's whole text on every call); the functions inside
-- it are made only when it runs.
--
--   'state': s is the trailer as read ('' when there is no key); returns
--     the decision's state as a table: base, n, tail, newest, lcum, q (the
--     entries of the trailer's q from the oldest in the window, or the
--     next ones of the body), live (the units in the window) and imp
--     (entries imported from the older key, which count after the body's);
--   'write': records cost units at now in state s, and returns the units in
--     the window with them and the oldest one's at (ms);
--   'unit': returns the at (ms) of unit number cost (from 1) in the window
--     of state s, counted from the oldest.
local function sliding_log_slow(op, key, window, param, s, cost, now, pack, unpack_ints)
  local cut = now - window

  -- at(e, i) is the ith entry (from 0) of string e.
  local function at(e, i)
    return (unpack_ints('>I4', e, 4 * i + 1))
  end

  -- read(from, count) reads count entries of the body from index from.
  local function read(from, count)
    if count <= 0 then
      return ''
    end
    return redis.call('GETRANGE', key, string.format('%d', 4 * from), string.format('%d', 4 * (from + count) - 1))
  end

  -- gone(e, from, to) is the number of entries of e from index from that
  -- have left the window, counting no further than index to - 1.
  local function gone(e, from, to)
    local i = from
    while i < to and (s.base + at(e, i)) * 1000 <= cut do
      i = i + 1
    end
    return i - from
  end

  if op == 'unit' then
    local body = s.live - #s.imp / 4
    if cost > body then
      return s.base + at(s.imp, cost - body - 1)
    elseif cost <= #s.q / 4 then
      return s.base + at(s.q, cost - 1)
    end
    return s.base + at(read(s.tail + cost - 1, 1), 0)
  end

  if op == 'state' then
    local tr = s
    s = {imp = '', q = '', live = 0, n = 0, tail = 0, newest = 0, lcum = 0}
    if #tr == 63 then
      local m, qi
      s.base, s.n, s.tail, s.newest, s.lcum, m, qi = unpack_ints('>I6I4I4I4I7I1I1', tr)
      m = m - qi
      if (s.base + s.newest) * 1000 > cut then
        -- The oldest entry in the window: in q, or in the body after it.
        local q = string.sub(tr, 32 + 4 * qi, 31 + 4 * (qi + m))
        local tail = s.tail + gone(q, 0, m)
        if tail - s.tail == m then
          local k = math.min(8, s.n - tail)
          local e = read(tail, k)
          local i = gone(e, 0, k)
          tail = tail + i
          q = string.sub(e, 4 * i + 1)
          if i == k then
            -- Those have all left too: a binary search over the rest, whose
            -- newest entry is in the window.
            local hi = s.n - 1
            while tail < hi do
              local mid = math.floor((tail + hi) / 2)
              if gone(read(mid, 1), 0, 1) == 0 then
                hi = mid
              else
                tail = mid + 1
              end
            end
            q = read(tail, math.min(8, s.n - tail))
          end
        else
          q = string.sub(q, 4 * (tail - s.tail) + 1)
        end
        s.q, s.tail, s.live = q, tail, s.n - tail
      else
        -- Everything has left the window: start again.
        s.base, s.n, s.tail, s.newest = nil, 0, 0, 0
      end
    end
    s.base = s.base or math.ceil(now / 1000)
    if param > 0 and (#tr ~= 63 or s.lcum > 0) then
      -- The key the ZSET log kept: its entries in the window with a cum
      -- above lcum, at no earlier than the newest entry.
      local old = string.sub(key, 1, param) .. string.sub(key, param + 5)
      if string.sub(key, param + 1, param + 4) ~= 'sl2:' or redis.call('EXISTS', old) == 0 then
        s.lcum = 0
        return s
      end
      -- A member at µs t is recorded at ceil(t / 1000) ms: in the window
      -- when t is past cut's millisecond.
      local members = redis.call('ZRANGEBYSCORE', old, string.format('%d', cut - cut % 1000 + 1), '+inf', 'WITHSCORES')
      if s.live == 0 and members[2] then
        -- Nothing of this key's in the window: count from the oldest member.
        s.base = math.min(s.base, math.ceil(tonumber(members[2]) / 1000))
      end
      local parts, top, newest = {}, s.lcum, s.newest
      for i = 1, #members, 2 do
        local m, cum, units = members[i], nil, 1
        if string.byte(m) < 48 then
          cum = unpack_ints('>I7', m, 8)
          if #m == 22 then
            units = unpack_ints('>I4', m, 19)
          end
        elseif s.lcum == 0 then
          -- Older still: one unit, and no cum; imported with a new key only.
          cum = 0
        end
        if cum and (cum > s.lcum or s.lcum == 0) then
          newest = math.max(newest, math.ceil(tonumber(members[i + 1]) / 1000) - s.base)
          parts[#parts + 1] = string.rep(pack('>I4', newest), units)
          top = math.max(top, cum)
        end
      end
      s.imp, s.newest, s.lcum = table.concat(parts), newest, math.max(top, 1)
      s.live = s.live + #s.imp / 4
    end
    return s
  end

  -- op == 'write'
  local off = math.max(math.ceil(now / 1000) - s.base, s.newest)
  local body = s.live - #s.imp / 4
  local whole = s.n == 0 or #s.imp > 0 or s.tail >= 64 and s.tail * 4 >= body or off >= 2147483648
  local live = ''
  if whole then
    live = read(s.tail, body) .. s.imp
  end
  if off >= 2147483648 then
    -- A new base: the oldest entry in the window's.
    local parts, base = {}, s.base + at(live, 0)
    for i = 0, #live / 4 - 1 do
      parts[i + 1] = pack('>I4', s.base + at(live, i) - base)
    end
    -- One assignment each: gopher-lua (miniredis) can assign a name of a
    -- multiple assignment before it reads it for the next.
    off = off + s.base - base
    live = table.concat(parts)
    s.base = base
  end
  -- The cost's entries: up to 4096 in one string, doubled up to its
  -- length rather than added one by one, and the rest as whole chunks of
  -- 4096 (16 KiB), written one after another: a long string made in Lua
  -- costs Redis more per byte than a short one written many times.
  local chunks, new = math.floor((cost - 1) / 4096), pack('>I4', off)
  local rest = cost - 4096 * chunks
  while #new < 4 * rest do
    new = new .. new
  end
  local chunk = new
  if chunks > 0 then
    while #chunk < 16384 do
      chunk = chunk .. chunk
    end
  end
  new = string.sub(new, 1, 4 * rest)
  local q, tail, n = s.q, s.tail, s.n + cost
  if whole then
    q, tail, n = string.sub(live, 1, 32), 0, s.live + cost
    if #q < 32 then
      q = q .. string.sub(new, 1, 32 - #q)
    end
  elseif #q / 4 == body and body < 8 then
    q = q .. string.sub(new, 1, 32 - #q)
  end
  local trailer = pack('>I6I4I4I4I7I1I1I4', s.base, n, tail, off, s.lcum, #q / 4, 0, at(q, 0)) .. q .. string.rep('\0', 32 - #q)
  local quarter = math.ceil(window / 4000)
  local expire = string.format('%d', (math.floor((s.base + off) / quarter) + 1) * quarter + math.ceil(window / 1000))
  local at_end = 4 * s.n
  if whole then
    -- The first write is the SET, which can grow memory (see lua.go).
    redis.call('SET', key, live .. new .. (chunks == 0 and trailer or ''), 'PXAT', expire)
    at_end = #live + #new
  else
    if chunks == 0 then
      redis.call('SETRANGE', key, string.format('%d', at_end), new .. trailer)
    else
      redis.call('SETRANGE', key, string.format('%d', at_end), new)
      at_end = at_end + #new
    end
    if math.floor((s.base + off) / quarter) ~= math.floor((s.base + s.newest) / quarter) then
      redis.call('PEXPIREAT', key, expire)
    end
  end
  if chunks > 0 then
    for i = 1, chunks do
      redis.call('SETRANGE', key, string.format('%d', at_end), chunk)
      at_end = at_end + #chunk
    end
    redis.call('SETRANGE', key, string.format('%d', at_end), trailer)
  end
  return s.live + cost, s.base + at(q, 0)
end

-- @validate
if cost > limit then
  invalid = 'cost must be at most the limit'
elseif limit > 100000 then
  invalid = 'a sliding log takes a limit of at most 100000'
elseif window > 2073600000000 then
  invalid = 'a sliding log takes a window of at most 24 days (2073600000000 µs)'
end

-- @check
-- The trailer (63 bytes), which gives the oldest entry in the window when
-- the key was last written (first).
local tr = redis.call('GETRANGE', key, '-63', '-1')
if #tr == 63 then
  local base, n, tail, newest, lcum, m, qi, e = unpack_ints('>I6I4I4I4I7I1I1I4', tr)
  local cut = now - window
  if m > qi and lcum == 0 and (base + newest) * 1000 > cut then
    -- The common path: the oldest entry in the window is e, i entries on
    -- from tail: in q, or once q has all left, in the next 8 entries of
    -- the body, which b2 then holds after the trailer.
    local i, b2 = 0, tr
    while (base + e) * 1000 <= cut do
      i = i + 1
      local c = i - m + qi -- below 0: in q; else in the body's entries
      if c < 0 then
        e = unpack_ints('>I4', tr, 32 + 4 * (qi + i))
      else
        if c == 0 then
          local k, from = math.min(8, n - tail - i), 4 * (tail + i)
          if k > 0 then
            b2 = tr .. redis.call('GETRANGE', key, string.format('%d', from), string.format('%d', from + 4 * k - 1))
          end
        end
        if c >= (#b2 - 63) / 4 then
          e = nil
          break
        end
        e = unpack_ints('>I4', b2, 64 + 4 * c)
      end
    end
    if e then
      local live = n - tail - i
      if live + cost <= limit then
        ok, a, b = true, e * 32 + i, b2
        break
      end
      if live + cost - limit == 1 then
        -- Rejected until the oldest unit leaves: a, when (µs); b, -1 minus
        -- the remaining.
        ok, a, b = false, (base + e) * 1000 + window, live - limit - 1
        break
      end
    end
  end
end
b = sliding_log_slow('state', key, window, param, tr, cost, now, pack, unpack_ints)
if b.live == 0 and b.lcum == 0 then
  ok, a, b = cost <= limit, nil, 0
  break
end
ok, a = b.live + cost <= limit, nil

-- @commit
if a then
  -- The common path: append to the body, unless it is due to be rewritten
  -- or the cost is large. a is the oldest entry in the window times 32
  -- plus how many entries left it (see check).
  local i = a % 32
  local base, n, tail, newest, lcum, m, qi = unpack_ints('>I6I4I4I4I7I1I1', b)
  tail = tail + i
  local live = n - tail
  local at = (now - now % 1000) / 1000
  if now % 1000 ~= 0 then
    at = at + 1
  end
  local off = at - base
  if off < newest then
    off = newest
  end
  if cost <= 64 and off < 2147483648 and (tail < 64 or tail * 4 < live) then
    -- The cost's entries but the last, which the trailer's pack writes:
    -- one pack call fewer for a cost of 1.
    local q, new = nil, ''
    if cost ~= 1 then
      new = string.rep(pack('>I4', off), cost - 1)
    end
    if #b > 63 then
      -- q: the entries of the body that check read, from the oldest in
      -- the window.
      q = string.sub(b, 64 + 4 * (i - m + qi))
      qi = 0
      m = #q / 4
      q = q .. string.rep('\0', 32 - #q)
    elseif live == m - qi - i and live < 8 then
      -- q holds every entry in the window: the new ones join it.
      q = string.sub(string.sub(b, 32 + 4 * (qi + i), 31 + 4 * m) .. new .. pack('>I4', off), 1, 32)
      qi = 0
      m = #q / 4
      q = q .. string.rep('\0', 32 - #q)
    else
      q = string.sub(b, 32, 63)
      qi = qi + i
    end
    redis.call('SETRANGE', key, string.format('%d', 4 * n), new .. pack('>I4I6I4I4I4I7I1I1I4', off, base, n + cost, tail, off, 0, m, qi, (a - i) / 32) .. q)
    local quarter = (window + 3999 - (window + 3999) % 4000) / 4000 -- ceil(window / 4000) ms
    at = base + off
    if at - at % quarter ~= base + newest - (base + newest) % quarter then
      redis.call('PEXPIREAT', key, string.format('%d', at - at % quarter + quarter + math.ceil(window / 1000)))
    end
    -- b first: gopher-lua (miniredis) assigns a before it reads a for b.
    b = base + (a - i) / 32
    a = live + cost
    break
  end
  local q = string.sub(b, 32 + 4 * (qi + i), 31 + 4 * m)
  if #b > 63 then
    q = string.sub(b, 64 + 4 * (i - m + qi))
  end
  b = {base = base, n = n, tail = tail, newest = newest, lcum = 0, q = q, live = live, imp = ''}
elseif b == 0 then
  b = {base = math.ceil(now / 1000), n = 0, tail = 0, newest = 0, lcum = 0, q = '', live = 0, imp = ''}
end
a, b = sliding_log_slow('write', key, window, param, b, cost, now, pack, unpack_ints)

-- @report
if admitted then
  remaining, reset, retry = limit - a, b * 1000 + window - now, 0
  break
end
if b == 0 or type(b) == 'table' and b.live == 0 then
  remaining, reset, retry = limit, window, 0
  break
end
if type(b) == 'number' then
  -- Rejected on the common path, until the oldest unit leaves (at a).
  remaining, reset, retry = -1 - b, a - now, a - now
  break
end
if a then
  -- Admissible on the common path, not recorded: the oldest entry in the
  -- window is a's (see commit).
  local i = a % 32
  local base, n, tail = unpack_ints('>I6I4I4', b)
  remaining, reset, retry = limit - (n - tail - i), (base + (a - i) / 32) * 1000 + window - now, 0
  break
end
remaining, reset, retry = math.max(0, limit - b.live), sliding_log_slow('unit', key, window, param, b, 1, now, pack, unpack_ints) * 1000 + window - now, 0
if not ok then
  retry = sliding_log_slow('unit', key, window, param, b, b.live + cost - limit, now, pack, unpack_ints) * 1000 + window - now
end
