-- Sliding window counter.
--
-- The window is divided into N sub-windows of window/N microseconds, aligned
-- on the clock. The count of a request is the sum of the N sub-windows that
-- overlap the window ending now: the current, partial one and the N-1
-- before it. So the counted span is between (N-1)/N of the window and the
-- whole window: any span of (N-1)/N of the window admits at most limit
-- units, while a whole window's length can, in the worst case, see up to
-- 2*limit. Memory is O(N) per key, whatever the limit.
--
-- Key    a string of 13 + 4N bytes, unsigned big-endian integers:
--          L      (7 bytes) the newest sub-window holding units, as its
--                 index (its start / the sub-window length);
--          d      (2 bytes) L minus the index of the oldest sub-window
--                 holding units;
--          total  (4 bytes) the units of sub-windows L-N+1 to L;
--          then N counts (4 bytes each): the units of sub-windows L, L-1,
--          ..., L-N+1.
--        So the common decisions read the first 17 bytes alone: while L is
--        the current sub-window, or older with sub-window L-d still counted,
--        the count is total, and the first sub-window to leave is L-d (once
--        L-d has left, the counts from it on tell what is left). An
--        admission in sub-window L rewrites total and L's count in place
--        (SETRANGE); one in a newer sub-window writes the string anew, its
--        counts moved along. The key expires when sub-window L stops being
--        counted. (The version before this one kept a hash, sub-window
--        index -> units, under another key name: ginlimit's keyTag.)
-- param  N, the number of sub-windows (an integer from 1 to 1000 that
--        divides the window).
-- cost   1 to the limit.
-- State  on the common path (see check) a, the string read, or sub-window
--        L's count when L is the current sub-window, and b, the integer
--        (total * 1024 + e) * 1024 + k, where e is the current sub-window's
--        index minus the oldest one holding units and k the current one's
--        minus L (N for a missing key or one whose units have all left);
--        otherwise a, the counted sub-windows as a table (index -> units,
--        with sum, their units, last, the newest, and grow, whether the
--        key holds fewer than N counts), and b nil.
--
-- A key of another N, on the same key name, is of the same sub-window
-- length (ginlimit's keyTag puts it in the key name): a new window, an
-- override's, of more or fewer sub-windows. It is read on the uncommon
-- path, every unit it holds still counted in the new window, and an
-- admission rewrites it with N counts. A key of fewer counts expires when
-- its newest sub-window leaves its shorter window: a rejection keeps it
-- (report) until that sub-window leaves this one.
--
-- After the clock stepped back, sub-windows newer than the current one
-- count too, until they leave, which only rejects more; an admission is
-- recorded in the current sub-window, or, when that is more than N-1 older
-- than L, in sub-window L-N+1, which leaves later (so only rejects more).
-- Only an admission rewrites the key (keeping the counted sub-windows), so
-- after the clock stepped back, units that had stopped counting count
-- again while their sub-window is in the window and the key still holds
-- them: that too only rejects more.
--
-- reset is the time until the oldest counted sub-window with units in it
-- leaves (the first moment remaining can grow; the next sub-window boundary
-- when there is none), and retry, for a rejected request, the time until
-- enough of them have left for its cost to fit. Sub-window i leaves the
-- count at (i + N) * window/N.

-- @validate
if param < 1 or param > 1000 or window % param ~= 0 then
  invalid = 'sub-windows (param) must be an integer from 1 to 1000 that divides the window'
elseif cost > limit then
  invalid = 'cost must be at most the limit'
end

-- @check
-- check reads the key with one GET; it only reads, so that the first write
-- of an admission is its SET or SETRANGE, which Redis refuses before
-- anything is written when it is out of memory. The common path reads the
-- first 17 bytes: nothing is counted when there is no key or every
-- sub-window has left (L+N <= the current one); otherwise, when L is not
-- newer than the current sub-window and L-d is still counted, total is the
-- count. When L-d has left while L still counts, the counts from L-d on
-- are read, to take those that left from total and find the oldest that
-- still holds units. A rejection that needs more than one unit to leave,
-- the clock behind L, or a key of another N reads every count into a
-- table (the uncommon path).
local sub = window / param
local cur = (now - now % sub) / sub
local s = redis.call('GET', key)
local total, e, k, held = 0, 0, param, s
if s then
  local common = #s == 13 + 4 * param
  if common then
    local last, d, t, c = unpack_ints('>I7I2I4I4', s)
    k = cur - last
    if k >= param then
      k = param
    elseif k < 0 or t < 1 then
      common = false
    else
      e = k + d
      if e >= param then
        -- Sub-windows L-d to L-N+k (counts d to N-k) have left.
        local v = { unpack_ints('>' .. string.rep('I4', d + 1), s, 14) }
        for j = param - k + 1, d + 1 do
          t = t - v[j]
        end
        if t < 1 then
          k, e = param, 0
        else
          local j = param - k
          while j > 1 and v[j] == 0 do
            j = j - 1
          end
          e = k + j - 1
        end
      end
      if t + cost > limit + 1 then
        common = false
      elseif k < param then
        total = t
        if k == 0 then
          held = c
        end
      end
    end
  end
  if not common then
    -- Every count, of any N, into a table of the counted sub-windows.
    local first = cur - param + 1
    local counts, sum, newest = {}, 0, nil
    local n = (#s - 13) / 4
    if n >= 1 and n % 1 == 0 then
      local v = { unpack_ints('>I7I2I4' .. string.rep('I4', n), s) }
      local last = v[1]
      for j = 0, n - 1 do
        local c, i = v[4 + j], last - j
        if c > 0 and i >= first then
          counts[i] = c
          sum = sum + c
          newest = newest or i
        end
      end
    end
    counts.sum, counts.last = sum, newest
    -- Written under fewer sub-windows (an override's longer window): its
    -- TTL ends when its newest leaves that many (see report).
    counts.grow = n < param
    ok, a, b = sum + cost <= limit, counts, nil
    break
  end
end
ok, a, b = total + cost <= limit, held, (total * 1024 + e) * 1024 + k

-- @commit
local sub = window / param
local cur = (now - now % sub) / sub
if b then
  local k = b % 1024
  local x = (b - k) / 1024
  local e = x % 1024
  local total = (x - e) / 1024 + cost
  b = b + cost * 1048576
  if k == 0 then
    -- L is the current sub-window: its count and total, in place (the
    -- key's expiry stays).
    redis.call('SETRANGE', key, '9', pack('>I4I4', total, a + cost))
    break
  end
  -- A new L: the counts move k places; those that fall off hold no
  -- units (they are older than the oldest that does).
  local v = pack('>I7I2I4I4', cur, e, total, cost)
  if k < param then
    if k > 1 then
      v = v .. string.rep('\0\0\0\0', k - 1)
    end
    v = v .. string.sub(a, 14, 13 + 4 * (param - k))
  elseif param > 1 then
    v = v .. string.rep('\0\0\0\0', param - 1)
  end
  redis.call('SET', key, v, 'PXAT', string.format('%d', math.ceil((cur + param) * sub / 1000)))
  break
end
-- The uncommon path: every count, rewritten. L is the newest counted
-- sub-window, or the current one; the request goes into the current
-- one, or the oldest that L keeps (see the top).
local counts = a
local last = counts.last
if not last or last < cur then
  last = cur
end
local r = last - param + 1
if r < cur then
  r = cur
end
counts[r] = (counts[r] or 0) + cost
local out, vals, oldest = { sum = counts.sum + cost, last = last }, {}, last
for j = 1, param do
  vals[j] = 0
end
for i, c in pairs(counts) do
  if type(i) == 'number' then
    if i < last - param + 1 then
      i = last - param + 1
    end
    out[i] = (out[i] or 0) + c
    vals[last - i + 1] = out[i]
    if i < oldest then
      oldest = i
    end
  end
end
redis.call('SET', key, pack('>I7I2I4' .. string.rep('I4', param), last, last - oldest, out.sum, unpack(vals)),
  'PXAT', string.format('%d', math.ceil((last + param) * sub / 1000)))
a, b = out, nil

-- @report
local sub = window / param
local cur = (now - now % sub) / sub
if b then
  local k = b % 1024
  local x = (b - k) / 1024
  local e = x % 1024
  local sum = (x - e) / 1024
  if sum == 0 then
    remaining, reset, retry = limit, (cur + 1) * sub - now, 0
    break
  end
  remaining, reset, retry = limit - sum, (cur - e + param) * sub - now, 0
  if not ok then
    retry = reset
  end
  break
end
-- The counted sub-windows, oldest first.
local counts, order = a, {}
if counts.grow and counts.last and not admitted and not peek then
  -- Keep a key of fewer sub-windows until its newest leaves this window,
  -- as an admission would (PEXPIREAT, which Redis allows out of memory):
  -- its TTL, set for the shorter window, would otherwise drop units that
  -- still count.
  redis.call('PEXPIREAT', key, string.format('%d', math.ceil((counts.last + param) * sub / 1000)))
end
for i in pairs(counts) do
  if type(i) == 'number' then
    order[#order + 1] = i
  end
end
table.sort(order)
local sum = counts.sum
remaining, reset, retry = limit - sum, (cur + 1) * sub - now, 0
local need = sum + cost - limit -- units that must leave before a retry fits
local freed = 0
for n = 1, #order do
  local i = order[n]
  local leaves = (i + param) * sub - now
  if n == 1 then
    reset = leaves
    if ok then
      break
    end
  end
  freed = freed + counts[i]
  if not ok and freed >= need then
    retry = leaves
    break
  end
end
