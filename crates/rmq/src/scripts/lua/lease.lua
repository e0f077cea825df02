-- lease.lua: serial mode's slot ownership, one slot's lease at a time.
-- Includes: layout
--
-- KEYS: the ten slot keys (see layout.lua); l (the lease) and f (in flight) are used.
-- ARGV[1] op: 'acquire' | 'renew' | 'release'
-- ARGV[2] owner: a consumer's random member id
-- ARGV[3] epoch: the one the caller holds (renew, release; ignored by acquire)
-- ARGV[4] ttl_ms: time to live (acquire, renew)
-- The epoch (fencing token) increases on every change of owner and never
-- decreases: the hash is never deleted, a release only clears the owner.
-- A release is refused while the slot has a message in flight, so a lease
-- is never given up under a running delivery.
-- Returns: { 1, epoch, until ms, now } granted
--          { 2, epoch, until ms, now } release refused: still in flight, still yours
--          { 0, current owner, until ms, now } refused (held by another, or epoch moved on)

local op, owner, epoch, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local t = redis.call('TYPE', K.l)['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. K.l .. ' holds a ' .. t .. ', expected a hash')
end
local l = redis.call('HMGET', K.l, 'owner', 'epoch', 'until')
local cur_owner, cur_epoch, cur_until = l[1] or '', l[2] or '0', tonumber(l[3] or '0')
local live = cur_owner ~= '' and cur_until > now

if op == 'acquire' then
  if live and cur_owner ~= owner then
    return { 0, cur_owner, cur_until, now }
  end
  -- A new epoch on every acquire, even by the same owner: a consumer that
  -- gave a slot up locally must not find its old deliveries valid again.
  cur_epoch = tostring(redis.call('HINCRBY', K.l, 'epoch', 1))
  local u = now + ttl
  redis.call('HSET', K.l, 'owner', owner, 'until', fmt(u))
  return { 1, cur_epoch, u, now }
elseif op == 'renew' then
  -- Renewing an expired lease is safe while nobody took it: the epoch is unchanged.
  if cur_owner == owner and cur_epoch == epoch then
    local u = now + ttl
    redis.call('HSET', K.l, 'until', fmt(u))
    return { 1, cur_epoch, u, now }
  end
  return { 0, cur_owner, cur_until, now }
elseif op == 'release' then
  if cur_owner == owner and cur_epoch == epoch and redis.call('ZCARD', K.f) > 0 then
    return { 2, cur_epoch, cur_until, now }
  end
  if cur_owner == owner and cur_epoch == epoch then
    redis.call('HSET', K.l, 'owner', '', 'until', '0')
    return { 1, cur_epoch, 0, now }
  end
  return { 0, cur_owner, cur_until, now }
end
return redis.error_reply('RMQ_BADARG unknown lease op ' .. tostring(op))
