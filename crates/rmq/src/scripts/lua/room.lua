-- room.lua: a bounded topic's room, one count per topic, shared by every
-- producer and consumer of every process. A producer reserves room for
-- the new messages of a send before it sends and commits after it: what
-- the send did not use (merges, refusals) comes back; a consumer gives
-- back one unit per message that ends (acked, dead, superseded by its
-- duplicate, cancelled); a cancel and a requeue of dead letters adjust it
-- too. The count never goes below zero; a process that dies between its
-- two steps leaves it too high (the bound is kept, some room is lost until
-- a recount).
--
-- KEYS[1] room: HASH limit (messages at most; absent: not bounded),
--         live (messages held or reserved), used (room sends ever used: a
--         running total, so that a recount knows what was sent during it)
-- KEYS[2] reservations: ZSET '<token>:<n>' -> deadline (ms): sends between
--         their reserve and their commit (a dead process's run out)
-- On a cluster the call also names itself with a third key (memo.lua), so
-- that a call the client sends twice is applied once.
-- ARGV[1] op: 'reserve' | 'commit' | 'give' | 'add' | 'set' | 'recount' | 'drop' | 'count'
-- ARGV[2] n: how many (reserve, give, add), the room reserved (commit), the limit (set),
--         or the running total `used` that count answered before a recount's reading
-- ARGV[3] m: the room not used (commit), the messages the topic holds (set, recount),
--         or the reservation's lease in ms (reserve)
-- ARGV[4] token: the send's reservation (reserve, commit)
-- reserve: takes room for up to n new messages -> { granted, limit };
--          with no bound every one is granted (limit 0) and nothing is written
-- commit:  a send that reserved n ends; m of them were not used -> { live, limit }
-- give:    gives n back (no bound: nothing is written) -> { live, limit }
-- add:     counts n more without asking (requeued dead letters) -> { live, limit }
-- set:     sets the limit; a topic bounded until now keeps its count, one
--          not bounded until now starts from m; 0 removes the bound -> { live, limit }
-- recount: live becomes m, plus the room of reservations not yet committed
--          nor run out, plus what sends used since n (they may have written
--          after their slot was counted: counted twice rather than missed)
--          -> { live, limit }
-- drop:    deletes both keys (their topic is deleted) -> { 0, 0 }
-- count:   -> { live, limit (0: none), used }
-- No reserve ever takes live above limit.

for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  local want = i == 1 and 'hash' or 'zset'
  if t ~= 'none' and t ~= want then
    return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t .. ', expected a ' .. want)
  end
end
local op, n, m, token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] or ''
local function whole(x)
  return x ~= nil and x >= 0 and x == math.floor(x)
end
if not whole(n) or not whole(m) then
  return redis.error_reply('RMQ_BADARG room.lua: n and m must be whole numbers >= 0')
end
local state = redis.call('HMGET', KEYS[1], 'limit', 'live', 'used')
local limit = tonumber(state[1] or '0') or 0
local live = tonumber(state[2] or '0') or 0
local used = tonumber(state[3] or '0') or 0
local function write()
  redis.call('HSET', KEYS[1], 'live', live, 'used', used)
end
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if op == 'drop' or (op == 'set' and n == 0) then
  redis.call('UNLINK', KEYS[1], KEYS[2])
  return { 0, 0 }
end
if op == 'set' then
  if limit <= 0 then
    live = m
    redis.call('UNLINK', KEYS[2])
  end
  redis.call('HSET', KEYS[1], 'limit', n)
  write()
  return { live, n }
end
if op == 'count' then
  return { live, limit, used }
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
    live = live + granted
    write()
    local now = server_ms()
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    redis.call('ZADD', KEYS[2], now + m, token .. ':' .. granted)
  end
  return { granted, limit }
elseif op == 'commit' then
  redis.call('ZREM', KEYS[2], token .. ':' .. n)
  local unused = math.min(m, n)
  live = math.max(live - unused, 0)
  used = used + n - unused
elseif op == 'give' then
  live = math.max(live - n, 0)
elseif op == 'add' then
  live = live + n
elseif op == 'recount' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', server_ms())
  local reserved = 0
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    reserved = reserved + (tonumber(string.match(member, ':(%d+)$')) or 0)
  end
  live = m + reserved + math.max(used - n, 0)
else
  return redis.error_reply('RMQ_BADARG room.lua: unknown op ' .. tostring(op))
end
write()
return { live, limit }
