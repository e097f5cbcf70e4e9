-- Fixed window.
--
-- Windows are aligned to multiples of the window length on the clock (in
-- microseconds since the Unix epoch). Up to limit units are admitted per
-- window, so across a boundary up to twice the limit can pass within one
-- window's length.
--
-- Key    a string of 11 bytes, unsigned big-endian integers: the start of
--        the window the count belongs to (µs, 7 bytes) and the units
--        admitted in it (4 bytes). The key expires with its window (less
--        than a millisecond later at most), set by the SET ... PXAT of the
--        window's first admission; the others only rewrite the count
--        (SETRANGE, which keeps the expiry). The stored start tells a stale
--        count from a current one.
-- param  unused (0).
-- cost   1 to the limit.
-- State  a = start (the window's start, µs) and b = count (units admitted
--        in it), negated when the key holds the older format and commit
--        must rewrite it whole.
--
-- reset is the time until the window ends, when remaining grows back to the
-- limit; retry, for a rejected request, is the same. check only reads, so
-- the first write of an admission is its SET or SETRANGE, which Redis
-- refuses before anything is written when it is out of memory.
--
-- A key that holds a hash was written by the format before this one
-- (s = the start, c = the count, expiring with the window): check reads it
-- (HMGET), and commit replaces it with a string. ginlimit keeps the two
-- formats under different key names ("fw:" and "fw2:"), so that instances
-- of the older version, which read only hashes, never meet a string.

-- @validate
if cost > limit then
  invalid = 'cost must be at most the limit'
end

-- @check
-- A stored window that starts at or after the current one still counts:
-- after the clock stepped back, the count goes on in that newer window until
-- it ends, which only rejects more.
local start = now - now % window
-- pcall: a hash (the older format) is an error reply to GET, a table
-- whose length is 0.
local v = redis.pcall('GET', key)
if v then
  if #v == 11 then
    local s, c = unpack_ints('>I7I4', v)
    if s >= start then
      ok, a, b = c + cost <= limit, s, c
      break
    end
  else
    -- The older format. redis.call: any other type is an error.
    local h = redis.call('HMGET', key, 's', 'c')
    local s = tonumber(h[1])
    if s and s >= start then
      local c = tonumber(h[2]) or 0
      ok, a, b = c + cost <= limit, s, -c
      break
    end
  end
end
ok, a, b = cost <= limit, start, 0

-- @commit
if b > 0 then
  -- The window's key is there with its expiry: rewrite the count alone.
  b = b + cost
  redis.call('SETRANGE', key, '7', pack('>I4', b))
  break
end
-- A new window, or the older format (count negated, or 0).
b = cost - b
redis.call('SET', key, pack('>I7I4', a, b), 'PXAT', string.format('%d', math.ceil((a + window) / 1000)))

-- @report
if b < 0 then
  b = -b
end
remaining, reset, retry = limit - b, a + window - now, 0
if not admitted and not ok then
  retry = reset
end
