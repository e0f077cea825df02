-- membership.lua: a consumer group's live members (serial mode).
--
-- KEYS[1] group: its members (HASH: member id -> heartbeat deadline ms)
-- ARGV[1] member: its id   ARGV[2] op: 'beat' | 'leave' | 'drop'   ARGV[3] timeout_ms
-- Forgets members whose deadline passed, records (or removes) the caller,
-- and returns { now, live member ids... }. 'drop' deletes the whole group
-- (its topic is being deleted) and returns { now }.

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
if ARGV[2] == 'drop' then
  redis.call('UNLINK', KEYS[1])
  return { now }
end
local all = redis.call('HGETALL', KEYS[1])
local res = { now }
for i = 1, #all, 2 do
  if all[i] ~= ARGV[1] then
    if tonumber(all[i + 1]) <= now then
      redis.call('HDEL', KEYS[1], all[i])
    else
      res[#res + 1] = all[i]
    end
  end
end
if ARGV[2] == 'leave' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])))
  res[#res + 1] = ARGV[1]
end
return res
