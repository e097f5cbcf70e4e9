-- The start of every decision script (the generator puts it after the
-- driver's check of its argument counts): it reads the clock.
--
-- ARGV[ARG_CLOCK] (ARGV[1], from the driver's layout) is the time in
-- microseconds, for tests (an integer from 0 to 2^53); empty means the
-- Redis clock (TIME). The other arguments are the driver's: see single.lua
-- and several.lua.
--
-- It leaves now, the time in µs (a number, exact below 2^53), and pack and
-- unpack_ints, which turn integers into big-endian bytes and back: Redis's
-- struct.pack and struct.unpack, for the formats '>' then I<n> (unsigned)
-- or i8 (signed, two's complement) per integer, where n is 1 to 8. Where
-- there is no struct library (miniredis), they are written out here, for
-- those formats only, and made only there: Redis runs a script's whole text
-- on every call, so each function a script defines is made again on every
-- call. The checks that name a bad setting are rule.lua's.
--
-- An integer handed to Redis (a score, a TTL) is written with
-- string.format('%d', n): Redis writes a Lua number argument with %.17g,
-- and Lua's own n .. '' uses %.14g, both floating-point formatting, which
-- costs more per argument; the sliding log's every admission passes its
-- score.

local now = ARGV[ARG_CLOCK]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2] -- Lua reads the digits itself: no tonumber call
else
  now = tonumber(now)
  if not now or now < 0 or now > 9007199254740992 or now % 1 ~= 0 then
    return redis.error_reply('ERR ginlimit: the test clock (ARGV[' .. ARG_CLOCK .. ']) must be an integer number of microseconds from 0 to 2^53, or empty for the Redis clock')
  end
end


local pack, unpack_ints
local struct = rawget(_G, 'struct') -- reading a missing global is an error
if struct then
  pack, unpack_ints = struct.pack, struct.unpack
else
  pack = function(format, ...)
    local bytes, i = {}, 0
    for size in string.gmatch(format, '[iI](%d)') do
      size = tonumber(size)
      i = i + 1
      local v = select(i, ...)
      local hi = math.floor(v / 4294967296)
      local x = v - hi * 4294967296
      if hi < 0 then
        hi = hi + 4294967296 -- only i8 is negative
      end
      local n = #bytes
      for j = 1, size do
        if j == 5 then
          x = hi
        end
        local r = x % 256
        bytes[n + size - j + 1] = r
        x = (x - r) / 256
      end
    end
    return string.char(unpack(bytes))
  end
  unpack_ints = function(format, s, pos)
    local out, p = {}, pos or 1
    for size in string.gmatch(format, 'I(%d)') do
      size = tonumber(size)
      local v = 0
      for j = p, p + size - 1 do
        v = v * 256 + string.byte(s, j)
      end
      out[#out + 1] = v
      p = p + size
    end
    out[#out + 1] = p
    return unpack(out)
  end
end
