-- inflight.lua: a topic's global in-flight cap, one pair of keys per topic,
-- shared by every consumer of every process. A consumer takes a permit per
-- delivery before it pops, frees it once the delivery's end is recorded,
-- and extends it with the delivery's lease. A permit runs out at its
-- deadline (the lease plus a margin), so a consumer that dies frees its
-- permits when their deliveries' leases would have run out.
--
-- KEYS[1] cap: HASH limit (permits at most; absent: no cap),
--         waiting (set while a consumer was refused: the next free announces room)
-- KEYS[2] permits: ZSET permit token -> deadline (server ms)
-- ARGV[1] op: 'take' | 'free' | 'extend' | 'set' | 'drop' | 'count'
-- ARGV[2] n: the limit (set), or the permits' lease in ms (take, extend)
-- ARGV[3] channel: where 'free' announces room ("room") to refused consumers
-- ARGV[4..] tokens: the permits named (take, free, extend)
-- take:   grants the first of the tokens while fewer than limit are held
--         -> { granted, wait ms }: wait is how long until the first held
--         permit runs out when none was granted (0 otherwise); with no cap
--         set, every token is granted and nothing is written.
-- free:   gives the tokens back -> { freed, 0 }
-- extend: pushes the deadline of the tokens still held to n ms from now -> { extended, 0 }
-- set:    sets the limit (0 removes the cap and the permits) -> { 0, 0 }
-- drop:   deletes both keys (their topic is deleted) -> { 0, 0 }
-- count:  -> { permits held now, limit (0: none) }
-- At any time at most limit permits are held.

for _, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k)['ok']
  local want = 'hash'
  if k == KEYS[2] then
    want = 'zset'
  end
  if t ~= 'none' and t ~= want then
    return redis.error_reply('RMQ_WRONGTYPE ' .. k .. ' holds a ' .. t .. ', expected a ' .. want)
  end
end
local op, n = ARGV[1], tonumber(ARGV[2])
if n == nil or n < 0 or n ~= math.floor(n) then
  return redis.error_reply('RMQ_BADARG inflight.lua: n is not a whole number >= 0')
end
if op == 'drop' or (op == 'set' and n == 0) then
  redis.call('UNLINK', KEYS[1], KEYS[2])
  return { 0, 0 }
end
if op == 'set' then
  redis.call('HSET', KEYS[1], 'limit', ARGV[2])
  return { 0, 0 }
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit') or '0') or 0
local tokens = {}
for i = 4, #ARGV do
  tokens[#tokens + 1] = ARGV[i]
end
if op == 'count' then
  if limit <= 0 then
    return { 0, 0 }
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  return { redis.call('ZCARD', KEYS[2]), limit }
end
if op == 'free' then
  if #tokens == 0 then
    return { 0, 0 }
  end
  local freed = redis.call('ZREM', KEYS[2], unpack(tokens))
  if freed > 0 and redis.call('HDEL', KEYS[1], 'waiting') == 1 then
    if string.find(ARGV[3], '{', 1, true) then
      redis.call('SPUBLISH', ARGV[3], 'room')
    else
      -- A single node: the wake-up channel and the room channel (keys.rs
      -- room_channel), where consumers that wait on the marks listen.
      redis.call('PUBLISH', ARGV[3], 'room')
      redis.call('PUBLISH', ARGV[3] .. ':room', 'room')
    end
  end
  return { freed, 0 }
end
if op == 'extend' then
  if limit <= 0 or #tokens == 0 then
    return { 0, 0 }
  end
  local args = { 'XX', 'CH' }
  for _, tok in ipairs(tokens) do
    args[#args + 1] = now + n
    args[#args + 1] = tok
  end
  return { redis.call('ZADD', KEYS[2], unpack(args)), 0 }
end
if op ~= 'take' then
  return redis.error_reply('RMQ_BADARG inflight.lua: unknown op ' .. tostring(op))
end
if limit <= 0 then
  return { #tokens, 0 }
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local room = limit - redis.call('ZCARD', KEYS[2])
local granted = math.max(math.min(#tokens, room), 0)
if granted < #tokens then
  redis.call('HSET', KEYS[1], 'waiting', '1')
end
if granted == 0 then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local wait = 1000
  if first[2] then
    wait = math.max(tonumber(first[2]) - now, 1)
  end
  return { 0, wait }
end
local args = {}
for i = 1, granted do
  args[#args + 1] = now + n
  args[#args + 1] = tokens[i]
end
redis.call('ZADD', KEYS[2], unpack(args))
return { granted, 0 }
