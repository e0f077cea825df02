-- membership.lua: a consumer group's live members (serial mode).
--
-- KEYS[1] the group (HASH: member id -> heartbeat deadline ms)
-- ARGV[1] member id   ARGV[2] 'beat' | 'leave'   ARGV[3] timeout ms
-- Forgets members whose deadline passed, records (or removes) the caller,
-- and returns { now, live member ids... }.

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
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
