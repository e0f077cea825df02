-- renew.lua: serial mode: one owner renews many slot leases in one call,
-- on a single Redis node (the keys are under several hash tags; on a
-- cluster each slot's lease is renewed by lease.lua instead).
--
-- KEYS[1] leases: each slot's lease hash (l in layout.lua), one key per slot (KEYS[1..n])
-- ARGV[1] owner: the member id   ARGV[2] ttl_ms: how long the leases last
-- ARGV[3] epochs: the epoch held of each lease, space-separated, in KEYS order
-- Each lease is renewed as lease.lua's 'renew' would: only while the owner
-- and the epoch still match (renewing an expired lease nobody took is safe,
-- the epoch is unchanged). Every key's type is checked before any write.
-- Returns: { now, until ms, code per lease... } code 1 renewed, 0 refused

local owner, ttl = ARGV[1], tonumber(ARGV[2])
local epochs = {}
for e in string.gmatch(ARGV[3], '%S+') do
  epochs[#epochs + 1] = e
end
if #epochs ~= #KEYS or not ttl or ttl < 1 then
  return redis.error_reply('RMQ_BADARG renew: one epoch per lease and a ttl are needed')
end
for i = 1, #KEYS do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= 'hash' then
    return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t .. ', expected a hash')
  end
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local u = string.format('%d', now + ttl)
local res = { now, now + ttl }
for i = 1, #KEYS do
  local l = redis.call('HMGET', KEYS[i], 'owner', 'epoch')
  if l[1] == owner and (l[2] or '0') == epochs[i] then
    redis.call('HSET', KEYS[i], 'until', u)
    res[#res + 1] = 1
  else
    res[#res + 1] = 0
  end
end
return res
