-- room.lua: a bounded topic's room, one key per topic, shared by every
-- producer and consumer of every process. A producer reserves room for
-- the new messages of a send before it sends and gives back what the send
-- did not use (merges, refusals); a consumer gives back one unit per
-- message that ends (acked, dead, superseded by its duplicate, cancelled);
-- a cancel and a requeue of dead letters adjust it too. The count never
-- goes below zero; a process that dies between its two steps leaves it too
-- high (the bound is kept, some room is lost until the next recount).
--
-- KEYS[1] room: HASH limit (messages at most; absent: not bounded), live (messages held)
-- ARGV[1] op: 'reserve' | 'give' | 'add' | 'set' | 'drop' | 'count'
-- ARGV[2] n: how many (reserve, give, add), or the limit (set)
-- ARGV[3] live: the recount that comes with a new limit (set)
-- reserve: takes room for up to n new messages -> { granted, limit };
--          with no bound every one is granted (limit 0) and nothing is written
-- give:    gives n back (no bound: nothing is written) -> { live, limit }
-- add:     counts n more without asking (requeued dead letters) -> { live, limit }
-- set:     sets the limit with a recount of live; a limit equal to the one
--          set already keeps the count; 0 removes the bound -> { live, limit }
-- drop:    deletes the key (its topic is deleted) -> { 0, 0 }
-- count:   -> { live, limit (0: none) }
-- No reserve ever takes live above limit.

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
local op, n = ARGV[1], tonumber(ARGV[2])
if n == nil or n < 0 or n ~= math.floor(n) then
  return redis.error_reply('RMQ_BADARG room.lua: n is not a whole number >= 0')
end
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit') or '0') or 0
local live = tonumber(redis.call('HGET', KEYS[1], 'live') or '0') or 0
if op == 'drop' or (op == 'set' and n == 0) then
  redis.call('UNLINK', KEYS[1])
  return { 0, 0 }
end
if op == 'set' then
  if n ~= limit then
    live = math.max(tonumber(ARGV[3]) or 0, 0)
    redis.call('HSET', KEYS[1], 'limit', n, 'live', live)
  end
  return { live, n }
end
if op == 'count' then
  return { live, limit }
end
if limit <= 0 then
  if op == 'reserve' then
    return { n, 0 }
  end
  return { 0, 0 }
end
if op == 'reserve' then
  local granted = math.max(math.min(n, limit - live), 0)
  if granted > 0 then
    redis.call('HSET', KEYS[1], 'live', live + granted)
  end
  return { granted, limit }
end
if op == 'give' then
  live = math.max(live - n, 0)
  redis.call('HSET', KEYS[1], 'live', live)
  return { live, limit }
end
if op == 'add' then
  live = live + n
  redis.call('HSET', KEYS[1], 'live', live)
  return { live, limit }
end
return redis.error_reply('RMQ_BADARG room.lua: unknown op ' .. tostring(op))
