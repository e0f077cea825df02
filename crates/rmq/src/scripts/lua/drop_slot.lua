-- drop_slot.lua: deletes every key of one slot (a topic being deleted).
-- Includes: layout pending pending_heads pending_read records
--
-- KEYS: the ten slot keys (see layout.lua), then the head index (and on a
-- single node the marks) when the connection keeps one.
-- UNLINK frees the memory in the background: the call stays short however
-- large the slot is.
-- Returns: the messages the slot held: pending, retry-waiting, in flight, parked
--          duplicates and dead letters.

local held = 0
for _, name in ipairs({ 'r', 'f', 'x' }) do
  local t = redis.call('TYPE', K[name])['ok']
  if t == 'zset' then
    held = held + redis.call('ZCARD', K[name])
  end
end
-- The pending set (pending.lua) when its keys hold what rmq writes.
local buckets = {}
local mt, qt = redis.call('TYPE', K.m)['ok'], redis.call('TYPE', K.q)['ok']
if (mt == 'hash' or mt == 'none') and (qt == 'zset' or qt == 'none') then
  pending_use('f')
  held = held + pending_count()
  buckets = pending_bucket_keys()
end
if #buckets > 0 then
  bulk('UNLINK', K.q, buckets, 1)
end
if redis.call('TYPE', K.n)['ok'] == 'hash' then
  for _, v in ipairs(redis.call('HVALS', K.n)) do
    if parked_parse(v) then
      held = held + 1 -- a parked duplicate (a bare cancel mark is no message)
    end
  end
end
redis.call('UNLINK', K.q, K.d, K.f, K.n, K.m, K.r, K.x, K.X, K.a, K.l)
-- The topic's head index and marks when the caller passes them after the
-- slot's keys (notify.lua describes them; on a cluster, the index of this
-- slot's hash tag, in its hash slot): they go with the topic's slots, each
-- call routed as the slot's own keys are.
for i = 11, 12 do
  local k = KEYS[i]
  if k and (string.find(k, ':heads#', 1, true) or string.find(k, ':marks#', 1, true)) then
    redis.call('UNLINK', k)
  end
end
return held
