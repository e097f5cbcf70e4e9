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
--                 imported so far, else 0; plus 2^52 while the body
--                 starts with a header (see Upgrade);
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
-- of the version before, it reads that key, and counts the members in its
-- window that it has not imported yet (cum above lcum) as its own, and the
-- decision writes them into this key, admitted or not (a refusal through
-- pcall, after its report: out of memory, the import waits). So the older
-- key is imported once, and later decisions read only what is new in it.
-- Each call reads a bounded part of it, whatever its size: its 8 newest
-- members, which hold all that is new on most calls; when all 8 are, how
-- many are in the window (ZCOUNT), and how many of those are new, found by
-- rank from the newest (cum grows with the rank: doubling, then halving,
-- one member read a step); up to 256 new members are read in one ZRANGE
-- and imported each at its own time; more, as 64 groups of consecutive
-- members, 65 members read: a group's units are the difference of the cum
-- of its newest member and of the one before it (modulo 2^51, as cum
-- wraps: the older version's own count), all at its newest member's time.
-- So the count is exact, and a unit never leaves the window sooner than
-- its member would, only up to a 64th of the members later (the oldest
-- format has no cum: with one of its members among those read, every unit
-- goes at the newest member's time, as many as the newest cum, the older
-- version's own bound, or one per member). Times are no earlier than this
-- key's newest entry, and at most the newest 100,000 units (the largest
-- limit of a sliding log, on which every limit decides as on all) are
-- kept, so the key stays bounded too.
--
-- A large import is not written. When nothing of this key is in the
-- window (its first decision, or all it held has left) and more than 256
-- members or 4,096 units are to be imported, the decision writes a header
-- instead, the body's first 16 bytes (4 entries, before tail): kind (1),
-- then for kind 1 the cums (7 each) of the unit before the range and of
-- its last, lo and hi: the range of units (at most the newest 100,000)
-- that the older key keeps counting; for kind 2 (a member of the oldest
-- format, without cum, among them), a time (ms) and a count, every unit at
-- that time (the newest member's, as for 64 groups). A decision reads it
-- while lcum says so: of kind 1, the units of the range in the window are
-- hi less the cum before the oldest member in the window (one
-- ZRANGEBYSCORE with LIMIT 0 1, O(log N)), exact to the member, as its
-- at is rounded up to the ms as an entry's is; and the kth of them is
-- found from that member by halving ranks (ZRANK, then up to 17 members
-- read one at a time). They are older than every entry of the body (newest
-- starts at the range's newest), so they count first. So the first touch
-- of a key of 100,000 members writes 79 bytes; a later call writes its own
-- admission, and up to 4,096 units of what instances of the version before
-- admitted since (see below), never the range. Once the range has left the window (or
-- the older key is gone), the header is dead: its bytes become 4 entries
-- at the base.
--
-- After this key's own entries, more than 4,096 units to copy (what
-- instances of the version before admitted since the call before, during
-- a rolling deploy) are copied 4,096 a call, the oldest first, as up to 16
-- groups of consecutive members, each at its newest member's time, the
-- last cut at the 4,096th unit (the member that holds it found by halving
-- ranks); lcum then marks where the copy stopped, inside a member if need
-- be, and the rest (np: the newest member's cum less lcum) counts in the
-- decision, exactly, and is copied by the next calls, no earlier than the
-- entries admitted in between. So each call writes 16 KiB of them at most.
--
-- During a rolling deploy an instance of this version counts every
-- admission of the older ones on the key it shares with them; they do not
-- count its own (they read only the ZSET), so for the deploy's duration
-- each older instance can admit up to the limit more. lcum goes back to 0 once the older key is gone: it expires a
-- window after its last admission. Both keys differ only in the tag before
-- the hash tag ({...}), so they are in one Redis Cluster slot.

-- sliding_log_slow(op, key, window, param, s, cost, now, pack, unpack_ints)
-- holds every path but the common ones, in one function that takes what it
-- uses as arguments, so that a call makes one closure and no upvalue
-- (Redis runs a script's whole text on every call); the functions inside
-- it are made only when it runs.
--
--   'state': s is the trailer as read ('' when there is no key); returns
--     the decision's state as a table: base, n, tail, newest, lcum, q (the
--     entries of the trailer's q from the oldest in the window, or the
--     next ones of the body), live (the units in the window), imp (the
--     entries imported from the older key, which count after the body's,
--     as runs {offset, units}), ni (their units), hp (the units of the
--     header's range in the window, which count first), hdr (the header,
--     while it counts), h0 and h0at (the oldest member of the older key in
--     the window and its at, for pend), held (whether the key had a
--     header), wh (whether the header is new, to write), and kept (the newest
--     entry of the key as it was);
--   'write': records cost units at now in state s (after the runs of imp;
--     a cost of 0 writes those alone), and returns the units in the
--     window with them and the oldest one's at (ms);
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

  -- zcum(m) is the cum of a member of the older key (see Upgrade), nil
  -- for the oldest format (a digit first); zunits(m) its units.
  local function zcum(m)
    if string.byte(m) < 48 then
      return (unpack_ints('>I7', m, 8))
    end
  end
  local function zunits(m)
    if #m == 22 and string.byte(m) < 48 then
      return (unpack_ints('>I4', m, 19))
    end
    return 1
  end

  -- pend(k) is the at (ms) of unit k (from 1) of the hp units of the
  -- header's range in the window (see Upgrade), the oldest in it: kind 2,
  -- all at one time; kind 1, the member whose cum reaches the range's
  -- first unit in the window plus k - 1, found from h0 (the oldest member
  -- in the window) by halving ranks, one member read a step: cum grows
  -- by one at least a rank, so it is at most k - 1 ranks on. Without h0
  -- (that member has no cum), the newest entry's time, no earlier than
  -- any unit of the range.
  local function pend(k)
    local kind, lo = unpack_ints('>I1I7', s.hdr)
    if kind == 2 then
      return lo
    elseif not s.h0 then
      return s.base + s.newest
    end
    local c0 = zcum(s.h0)
    local target = math.max(lo, c0 - zunits(s.h0)) + k
    if target <= c0 then
      return math.ceil(s.h0at / 1000)
    end
    local r = redis.call('ZRANK', s.old, s.h0)
    local hi, at = r + target - c0, nil
    while hi - r > 1 do
      local mid = math.floor((r + hi) / 2)
      local e = redis.call('ZRANGE', s.old, string.format('%d', mid), string.format('%d', mid), 'WITHSCORES')
      if e[1] == nil or (zcum(e[1]) or target) >= target then
        hi, at = mid, tonumber(e[2])
      else
        r = mid
      end
    end
    if not at then
      at = tonumber(redis.call('ZRANGE', s.old, string.format('%d', hi), string.format('%d', hi), 'WITHSCORES')[2])
    end
    return math.ceil((at or s.h0at) / 1000)
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
    if cost <= s.hp then
      return pend(cost)
    end
    cost = cost - s.hp
    local k = cost - (s.live - s.hp - s.ni - s.np)
    if k > 0 then
      for _, r in ipairs(s.imp) do
        if k <= r[2] then
          return s.base + r[1]
        end
        k = k - r[2]
      end
      -- One of np, which a later call records no earlier than this key's
      -- newest entry, nor than the older key's newest member.
      return math.max(s.base + s.newest, s.npat or 0)
    elseif cost <= #s.q / 4 then
      return s.base + at(s.q, cost - 1)
    end
    return s.base + at(read(s.tail + cost - 1, 1), 0)
  end

  if op == 'state' then
    local tr = s
    s = {imp = {}, ni = 0, hp = 0, np = 0, q = '', live = 0, n = 0, tail = 0, newest = 0, lcum = 0}
    if #tr == 63 then
      local m, qi
      s.base, s.n, s.tail, s.newest, s.lcum, m, qi = unpack_ints('>I6I4I4I4I7I1I1', tr)
      if s.lcum >= 4503599627370496 then
        -- lcum's bit 52: the body starts with a header (see Upgrade).
        s.lcum, s.hdr, s.held = s.lcum - 4503599627370496, param > 0 or nil, true
      end
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
        -- Everything has left the window, the header's range too (it is
        -- no newer than newest): start again.
        s.base, s.n, s.tail, s.newest, s.hdr = nil, 0, 0, 0, nil
      end
    end
    s.base = s.base or math.ceil(now / 1000)
    -- kept: the newest entry of the key as it is, which its expiry
    -- follows (newest moves on with what is imported).
    s.kept = s.newest
    if param > 0 and (#tr ~= 63 or s.lcum > 0) then
      -- The key the ZSET log kept (see Upgrade): its members in the window
      -- with a cum above lcum (every one while lcum is 0), as entries at
      -- no earlier than the newest entry, in one bounded pass.
      local old = string.sub(key, 1, param) .. string.sub(key, param + 5)
      s.old = old
      if string.sub(key, param + 1, param + 4) ~= 'sl2:' then
        s.lcum, s.hdr = 0, nil
        return s
      end
      -- A member at µs t is recorded at ceil(t / 1000) ms: in the window
      -- when t is at least from, past cut's millisecond.
      local from = cut - cut % 1000 + 1
      -- Its 8 newest members, which hold all there is to import on most
      -- calls.
      local top = redis.call('ZREVRANGE', old, '0', '7', 'WITHSCORES')
      if not top[1] then
        -- The older key is gone, and with it whatever it held in the
        -- window: stop looking for it.
        s.lcum, s.hdr = 0, nil
        return s
      end
      if s.hdr then
        -- The header's range: how many of its units are in the window.
        local h = redis.call('GETRANGE', key, '0', '15')
        local kind, lo, hi = unpack_ints('>I1I7I7', h)
        s.hdr = h
        if kind == 2 then
          if lo * 1000 > cut then
            s.hp = hi
          end
        else
          local e = redis.call('ZRANGEBYSCORE', old, string.format('%d', from), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
          if e[1] and zcum(e[1]) then
            s.hp = math.max(0, hi - math.max(lo, zcum(e[1]) - zunits(e[1])))
            s.h0, s.h0at = e[1], tonumber(e[2])
          elseif e[1] then
            -- A member of the oldest format, written among the range by
            -- an instance two versions back: the whole range counts, at
            -- the newest entry's time (see pend).
            s.hp = hi - lo
          end
        end
        if s.hp == 0 then
          -- All of it has left the window: the header is dead.
          s.hdr = nil
        end
        s.live = s.live + s.hp
      end
      -- cum(m) is member m's cum, nil for the oldest format (a digit
      -- first); cost(m) its units; fresh(m) whether it is to be imported:
      -- cum above lcum, or anything while lcum is 0.
      -- A member that a call before copied in part (lcum inside it, see
      -- np): its other units only.
      local cum = zcum
      local function cost(m)
        local c, u = zunits(m), zcum(m)
        if u and s.lcum > 0 and u - s.lcum < c then
          c = u - s.lcum
        end
        return c
      end
      local function fresh(m)
        local c = cum(m)
        return s.lcum == 0 or c ~= nil and c > s.lcum
      end
      -- member(r) is the member of rank r (from the newest, -1) and its
      -- score: O(log N) in Redis, whatever the key's size.
      local function member(r)
        r = string.format('%d', r)
        local e = redis.call('ZRANGE', old, r, r, 'WITHSCORES')
        return e[1], tonumber(e[2])
      end
      local parts = {} -- {at (µs), units}, oldest first
      if tonumber(top[2]) >= from and fresh(top[1]) then
        -- How many of the newest members to import: those in the window,
        -- and while lcum is above 0, those with a cum above it, which are
        -- the newest (cum grows with the rank). Among the 8 read, or when
        -- all 8 are, counted (ZCOUNT), and found from the newest, doubling,
        -- then halving, each step one member read.
        local lo = 0
        while top[2 * lo + 1] and tonumber(top[2 * lo + 2]) >= from and fresh(top[2 * lo + 1]) do
          lo = lo + 1
        end
        if lo == 8 then
          local count = redis.call('ZCOUNT', old, string.format('%d', from), '+inf')
          local hi = count + 1
          if s.lcum == 0 then
            lo = count
          end
          while lo < count and hi == count + 1 do
            local d = math.min(2 * lo, count)
            if fresh(member(-d)) then
              lo = d
            else
              hi = d
            end
          end
          while hi - lo > 1 do
            local mid = math.floor((lo + hi) / 2)
            if fresh(member(-mid)) then
              lo = mid
            else
              hi = mid
            end
          end
        end
        -- Nothing in this key, and more than 256 members or 4,096 units
        -- to import: a header that counts them from the older key (see
        -- Upgrade), instead of their entries.
        local f, fat
        if lo > 0 then
          if lo <= 8 then
            f, fat = top[2 * lo - 1], tonumber(top[2 * lo])
          else
            f, fat = member(-lo)
          end
        end
        local ctop, tat = cum(top[1]), tonumber(top[2])
        if s.n == 0 and f and (lo > 256 or ctop and cum(f) and ctop - cum(f) + cost(f) > 4096) then
          if ctop and cum(f) then
            local first = math.max(cum(f) - cost(f), ctop - 100000)
            s.hdr, s.hp, s.h0, s.h0at = pack('>I1I7I7I1', 1, first, ctop, 0), ctop - first, f, fat
          else
            -- The oldest format among them: as for 64 groups, below.
            s.hp = math.min(ctop and ctop - s.lcum or lo, 100000)
            s.hdr = pack('>I1I7I7I1', 2, math.ceil(tat / 1000), s.hp, 0)
          end
          s.wh, s.live = true, s.hp
          s.base = math.min(s.base, math.ceil(fat / 1000))
          s.newest = math.ceil(tat / 1000) - s.base
          lo = 0
        end
        local c0 = ctop and f and cum(f) and math.max(cum(f) - cost(f), ctop - 100000)
        if lo > 0 and c0 and ctop - c0 > 4096 then
          -- More than 4,096 units after this key's own entries (a rolling
          -- deploy): the oldest 4,096 now, as up to 16 groups of
          -- consecutive members, each at its newest member's time, the
          -- last cut at unit c0 + 4,096 (z holds it: halving ranks, one
          -- member read a step); the rest (np) counts, exactly, and is
          -- left to the next calls, as lcum marks where the copy stopped.
          local target, a, z = c0 + 4096, -lo - 1, -1
          while z - a > 1 do
            local mid = math.floor((a + z) / 2)
            if (cum(member(mid)) or target) >= target then
              z = mid
            else
              a = mid
            end
          end
          local prev, last = c0, -lo - 1
          for g = 1, 16 do
            local e = -lo - 1 + math.ceil(g * (z + lo + 1) / 16)
            if e > last then
              local m, at = member(e)
              local c = math.min(cum(m) or target, target)
              if c > prev then
                parts[#parts + 1] = {at, c - prev}
                prev = c
              end
              last = e
            end
          end
          s.np, s.npat, s.lcum = ctop - target, math.ceil(tat / 1000), target
          lo = 0
        end
        if lo <= 8 then
          -- Few: each member at its own time, exactly, oldest first.
          for i = lo, 1, -1 do
            parts[#parts + 1] = {tonumber(top[2 * i]), cost(top[2 * i - 1])}
          end
        elseif lo <= 256 then
          local members = redis.call('ZRANGE', old, string.format('%d', -lo), '-1', 'WITHSCORES')
          for i = 1, #members, 2 do
            if fresh(members[i]) then
              parts[#parts + 1] = {tonumber(members[i + 1]), cost(members[i])}
            end
          end
        else
          -- Many: 64 groups of consecutive members, each group's units
          -- (the difference of the cums of its newest member and the one
          -- before it, modulo 2^51 as cum wraps, the older version's own
          -- count) at the time of its newest member: exact in number, and
          -- each unit counted no sooner than its own member, so it leaves
          -- the window no sooner either. 65 members read, whatever lo is.
          local f = member(-lo)
          local prev = cum(f)
          if prev then
            prev = prev - cost(f)
          end
          for j = 1, 64 do
            local e, at = member(math.floor(j * lo / 64) - lo - 1)
            local c = cum(e)
            if not prev or not c then
              -- A member of the oldest format (no cum) among them: every
              -- unit at the newest member's time, as many as the older
              -- version counted (the newest cum) or one per member.
              c = cum(top[1])
              parts = {{tonumber(top[2]), c and c - s.lcum or lo}}
              break
            end
            parts[j] = {at, (c - prev) % 2251799813685248}
            prev = c
          end
        end
      end
      -- At most MaxLogLimit units, the newest: any limit a sliding log
      -- takes decides the same on them as on all (the key stays full
      -- until the older ones have left anyway), and the key's memory stays
      -- bounded.
      local keep, first = 100000, #parts + 1
      while first > 1 and keep > 0 do
        first = first - 1
        parts[first][2] = math.min(parts[first][2], keep)
        keep = keep - parts[first][2]
      end
      if s.live == 0 and parts[first] then
        -- Nothing of this key's in the window: count from the oldest.
        s.base = math.min(s.base, math.ceil(parts[first][1] / 1000))
      end
      -- As runs of entries, {offset, units}: a long string made in Lua
      -- costs Redis more per byte than short ones written one after
      -- another (see write).
      local newest = s.newest
      for i = first, #parts do
        newest = math.max(newest, math.ceil(parts[i][1] / 1000) - s.base)
        s.imp[#s.imp + 1] = {newest, parts[i][2]}
        s.ni = s.ni + parts[i][2]
      end
      s.newest = newest
      if s.np == 0 then
        s.lcum = math.max(cum(top[1]) or 0, s.lcum, 1)
      end
      s.live = s.live + s.ni + s.np
    end
    return s
  end

  -- op == 'write': cost entries at now, after the runs imported (s.imp);
  -- a cost of 0 writes the runs alone (see report).
  local off = s.newest
  if cost > 0 then
    off = math.max(math.ceil(now / 1000) - s.base, s.newest)
  end
  local body = s.live - s.ni - s.hp - s.np
  local whole = s.n == 0 or s.tail >= 64 and s.tail * 4 >= body or off >= 2147483648
  local live, runs = '', s.imp
  if whole then
    live = read(s.tail, body)
  end
  if off >= 2147483648 then
    -- A new base: the oldest entry in the window's. The runs join the
    -- live entries first (once in 2^31 ms at most).
    local parts = {live}
    for _, r in ipairs(runs) do
      parts[#parts + 1] = string.rep(pack('>I4', r[1]), r[2])
    end
    live, runs = table.concat(parts), {}
    parts = {}
    local base = s.base + at(live, 0)
    for i = 0, #live / 4 - 1 do
      parts[i + 1] = pack('>I4', s.base + at(live, i) - base)
    end
    -- One assignment each: gopher-lua (miniredis) can assign a name of a
    -- multiple assignment before it reads it for the next.
    off = off + s.base - base
    live = table.concat(parts)
    s.base = base
  end
  if cost > 0 then
    runs[#runs + 1] = {off, cost}
  end
  -- q: the first 8 entries from tail, completed from the runs when the
  -- body has fewer.
  local q, tail, n = s.q, s.tail, s.n + s.ni + cost
  if whole then
    -- The header, if any, first (see Upgrade).
    local h = s.hdr and 4 or 0
    q, tail, n = string.sub(live, 1, 32), h, h + #live / 4 + s.ni + cost
  end
  if whole or #q / 4 == body and body < 8 then
    for _, r in ipairs(runs) do
      if #q < 32 then
        q = q .. string.rep(pack('>I4', r[1]), math.min(r[2], (32 - #q) / 4))
      end
    end
  end
  local lcum, first = s.lcum, 0
  if s.hdr then
    lcum = lcum + 4503599627370496
  end
  if #q > 0 then
    first = at(q, 0)
  end
  local trailer = pack('>I6I4I4I4I7I1I1I4', s.base, n, tail, off, lcum, #q / 4, 0, first) .. q .. string.rep('\0', 32 - #q)
  local quarter = math.ceil(window / 4000)
  local expire = string.format('%d', (math.floor((s.base + off) / quarter) + 1) * quarter + math.ceil(window / 1000))
  -- The bytes after the body (or, whole, from the start): the live
  -- entries, each run, the trailer. Pieces under 4 KiB go together, up to
  -- 16 KiB a call; a run of up to 2048 entries is one string.rep (which
  -- fills a buffer on the C stack, so Redis allocates the result only); a
  -- longer one is doubled up to 4096 entries (16 KiB), written as many
  -- times as it fills, then its rest: a long string made in Lua costs
  -- Redis more per byte than a short one written many times. The first
  -- write is the SET or the first SETRANGE, which can grow memory (see
  -- lua.go); one piece, one call, for the most.
  local at_end, out, size, wrote = 4 * s.n, {}, 0, false
  if whole then
    at_end = 0
  end
  local function flush(text)
    if whole and not wrote then
      redis.call('SET', key, text, 'PXAT', expire)
    else
      redis.call('SETRANGE', key, string.format('%d', at_end), text)
    end
    wrote, at_end = true, at_end + #text
  end
  local function put(text)
    if size > 0 and (size + #text > 16384 or #text >= 4096) then
      flush(table.concat(out))
      out, size = {}, 0
    end
    if #text >= 4096 then
      flush(text)
    else
      out[#out + 1], size = text, size + #text
    end
  end
  if whole and s.hdr then
    put(s.hdr)
  end
  put(live)
  for _, r in ipairs(runs) do
    local units, e = r[2], pack('>I4', r[1])
    if units <= 2048 then
      put(string.rep(e, units))
    else
      while #e < 16384 do
        e = e .. e
      end
      while units >= 4096 do
        put(e)
        units = units - 4096
      end
      put(string.sub(e, 1, 4 * units))
    end
  end
  put(trailer)
  flush(table.concat(out))
  if not whole and math.floor((s.base + off) / quarter) ~= math.floor((s.base + (s.kept or s.newest)) / quarter) then
    redis.call('PEXPIREAT', key, expire)
  end
  if s.held and not s.hdr and not whole then
    -- The header is dead: 4 entries at the base, so that the body stays
    -- in order.
    redis.call('SETRANGE', key, '0', string.rep('\0', 16))
  end
  if s.hp > 0 then
    return s.live + cost, pend(1)
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
  b = {base = base, n = n, tail = tail, newest = newest, lcum = 0, q = q, live = live, imp = {}, ni = 0, hp = 0, np = 0}
elseif b == 0 then
  b = {base = math.ceil(now / 1000), n = 0, tail = 0, newest = 0, lcum = 0, q = '', live = 0, imp = {}, ni = 0, hp = 0, np = 0}
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
if (b.ni > 0 or b.wh) and not peek then
  -- Not recorded, but imported from the older key (see Upgrade): written
  -- now, so that no later decision imports it again. Through pcall: out
  -- of memory (this is then the script's first write), the decision
  -- stands and the import waits for a later one.
  pcall(sliding_log_slow, 'write', key, window, param, b, 0, now, pack, unpack_ints)
end
