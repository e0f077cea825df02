-- renew.lua: serial mode: one owner renews many slot leases in one call.
-- On a single Redis node every lease is declared (KEYS); on a cluster the
-- call declares one lease, which routes it to the master serving that
-- lease, and names the others this master serves in ARGV (the script's
-- allow-cross-slot-keys flag lets it reach keys of other hash slots on
-- its own node). An undeclared lease not on this node (the client's view
-- of the cluster was stale, or its hash slot is moving) or missing answers
-- 2: the client renews it alone, through lease.lua, which follows the
-- redirect and gives the real answer.
--
-- KEYS[1] leases: each slot's lease hash (l in layout.lua), one key per slot (KEYS[1..n])
-- ARGV[1] owner: the member id   ARGV[2] ttl_ms: how long the leases last
-- ARGV[3] epochs: the epoch held of each lease, space-separated, KEYS then more_leases
-- ARGV[4] more_leases: (cluster) further lease hashes on this node, one per argument (ARGV[4..])
-- Each lease is renewed as lease.lua's 'renew' would: only while the owner
-- and the epoch still match (renewing an expired lease nobody took is safe,
-- the epoch is unchanged). It never creates a key. Every key's type is
-- checked before any write.
-- Returns: { now, until ms, code per lease... } code 1 renewed, 0 refused,
-- 2 not found on this node (not renewed)

local owner, ttl = ARGV[1], tonumber(ARGV[2])
local leases = {}
for i = 1, #KEYS do
  leases[#leases + 1] = KEYS[i]
end
for i = 4, #ARGV do
  leases[#leases + 1] = ARGV[i]
end
local epochs = {}
for e in string.gmatch(ARGV[3] or '', '%S+') do
  epochs[#epochs + 1] = e
end
if #epochs ~= #leases or not ttl or ttl < 1 then
  return redis.error_reply('RMQ_BADARG renew: one epoch per lease and a ttl are needed')
end
local here = {}
for i = 1, #leases do
  -- Only an undeclared key can be elsewhere: a declared one routed the call.
  local t = redis.pcall('TYPE', leases[i])
  if type(t) == 'table' and t['ok'] then
    t = t['ok']
    if t ~= 'none' and t ~= 'hash' then
      return redis.error_reply('RMQ_WRONGTYPE ' .. leases[i] .. ' holds a ' .. t .. ', expected a hash')
    end
    -- A lease hash is never deleted, so an undeclared one that is missing
    -- is elsewhere too: a call that followed an ASK redirect may read
    -- every key of the hash slot being imported, moved yet or not.
    here[i] = t == 'hash' or i <= #KEYS
  elseif i <= #KEYS then
    return t
  end
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local u = string.format('%d', now + ttl)
local res = { now, now + ttl }
for i = 1, #leases do
  if not here[i] then
    res[#res + 1] = 2
  else
    local l = redis.call('HMGET', leases[i], 'owner', 'epoch')
    if l[1] == owner and (l[2] or '0') == epochs[i] then
      redis.call('HSET', leases[i], 'until', u)
      res[#res + 1] = 1
    else
      res[#res + 1] = 0
    end
  end
end
return res
