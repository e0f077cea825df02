-- drop_slot.lua: deletes every key of one slot (a topic being deleted).
-- Includes: layout records
--
-- KEYS: the ten slot keys (see layout.lua).
-- UNLINK frees the memory in the background: the call stays short however
-- large the slot is.
-- Returns: the messages the slot held: pending, retry-waiting, in flight, parked
--          duplicates and dead letters.

local held = 0
for _, name in ipairs({ 'q', 'r', 'f', 'x' }) do
  local t = redis.call('TYPE', K[name])['ok']
  if t == 'zset' then
    held = held + redis.call('ZCARD', K[name])
  end
end
if redis.call('TYPE', K.n)['ok'] == 'hash' then
  for _, v in ipairs(redis.call('HVALS', K.n)) do
    if parked_parse(v) then
      held = held + 1 -- a parked duplicate (a bare cancel mark is no message)
    end
  end
end
redis.call('UNLINK', K.q, K.d, K.f, K.n, K.m, K.r, K.x, K.X, K.a, K.l)
return held
