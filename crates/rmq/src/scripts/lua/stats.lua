-- stats.lua: depth per state and counters of one slot (reads only).
-- Includes: layout records lifecycle
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r')
-- Returns: { now, pending, due now, retry waiting, in flight, waiting behind in flight,
--            dead, counter name, counter value, ... }

local kind = ARGV[1]
local now = now_ms()
local pending = redis.call('ZCARD', K.q)
local due = pending
if kind ~= 'p' then
  due = redis.call('ZCOUNT', K.q, '-inf', now)
end
local res = {
  now, pending, due, redis.call('ZCARD', K.r), redis.call('ZCARD', K.f),
  redis.call('HLEN', K.n), redis.call('ZCARD', K.x),
}
local m = redis.call('HGETALL', K.m)
for i = 1, #m do
  res[#res + 1] = m[i]
end
return res
