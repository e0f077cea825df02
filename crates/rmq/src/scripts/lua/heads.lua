-- heads.lua: reads, marks or drops a topic's head index (a single node
-- only; notify.lua describes the index and who keeps it).
--
-- KEYS[1] index: ZSET slot -> when the slot may next have work; its member
--   '*' (score +inf) marks it complete: every slot with work has an entry.
-- KEYS[2] marks: ZSET slot -> work no consumer was told of (notify.lua);
--   only 'drop' uses it.
-- ARGV[1] op: 'read' | 'mark' | 'drop'
-- ARGV[2] limit: 'read' returns at most this many entries, smallest first
-- 'read' returns { complete (1 or 0), more (1 if entries were left out, else 0),
--                  slot, value, slot, value, ... }
-- 'mark' notes the index complete (a consumer that just looked at every
--   slot, or a topic defined now, which holds nothing); returns 1.
-- 'drop' deletes the index and the marks (the topic is being deleted); returns 1.
-- Error reply RMQ_WRONGTYPE when the index holds a foreign type; RMQ_BADARG
-- for an unknown op or a bad limit.

local op = ARGV[1]
if op ~= 'read' and op ~= 'mark' and op ~= 'drop' then
  return redis.error_reply('RMQ_BADARG unknown index op ' .. tostring(op))
end
if op == 'drop' then
  redis.call('UNLINK', KEYS[1], KEYS[2])
  return 1
end
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'zset' and t ~= 'none' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a zset')
end
if op == 'mark' then
  redis.call('ZADD', KEYS[1], '+inf', '*')
  return 1
end
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit ~= math.floor(limit) then
  return redis.error_reply('RMQ_BADARG index read limit ' .. tostring(ARGV[2]))
end
local complete = redis.call('ZSCORE', KEYS[1], '*') and 1 or 0
local entries = redis.call('ZRANGE', KEYS[1], 0, limit - 1, 'WITHSCORES')
local out = { complete, 0 }
for i = 1, #entries, 2 do
  if entries[i] ~= '*' then
    out[#out + 1] = entries[i]
    out[#out + 1] = entries[i + 1]
  end
end
if redis.call('ZCARD', KEYS[1]) - complete > (#out - 2) / 2 then
  out[2] = 1
end
return out
