-- stats.lua: depth per state and counters of one slot (reads only).
-- Includes: layout records
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r')
-- Returns: { now, pending, due now, retry waiting, in flight, waiting behind in flight,
--            dead, paused (1 or 0), counter name, counter value, ... }

local kind = ARGV[1]
local now = now_ms()
-- Parked duplicates: n's entries but the bare cancel marks ('x', see
-- records.lua); n holds one entry per in-flight key at most.
local parked = redis.call('HLEN', K.n)
if parked > 0 then
  for _, v in ipairs(redis.call('HVALS', K.n)) do
    if v == CANCELLED then
      parked = parked - 1
    end
  end
end
local pending = redis.call('ZCARD', K.q)
local due = pending
if kind ~= 'p' then
  due = redis.call('ZCOUNT', K.q, '-inf', now)
end
local res = {
  now, pending, due, redis.call('ZCARD', K.r), redis.call('ZCARD', K.f),
  parked, redis.call('ZCARD', K.x), redis.call('HEXISTS', K.l, 'paused'),
}
local m = redis.call('HGETALL', K.m)
for i = 1, #m do
  res[#res + 1] = m[i]
end
return res
