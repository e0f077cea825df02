-- stats.lua: depth per state and counters of one slot or of many slots of
-- one node (reads only).
-- Includes: layout pending pending_heads pending_read records
--
-- KEYS: the ten slot keys (see layout.lua) of each slot, slot after slot
--   (more than one slot on a single Redis node only).
-- ARGV[1] kind ('p' | 'f' | 'r')
-- Returns: { now, then per slot one array: { pending, due now, retry waiting,
--            in flight, waiting behind in flight, dead, paused (1 or 0),
--            serial lease owner ('' when none holds it now), lease epoch,
--            lease until ms, counter name, counter value, ... } }
--   A slot that holds no key at all (never used) answers an empty array.
-- Error reply RMQ_BADARG when KEYS are not whole slots.

local kind = pending_use(ARGV[1])
local slots = slots_in_keys()
if not slots then
  return redis.error_reply('RMQ_BADARG stats: ten keys per slot')
end
local now = now_ms()

local function slot_stats()
  if redis.call('EXISTS', K.q, K.d, K.f, K.n, K.m, K.r, K.x, K.X, K.a, K.l) == 0 then
    return {}
  end
  -- Parked duplicates: n's entries but the bare cancel marks ('x', see
  -- records.lua); n holds one entry per in-flight key at most.
  local parked = redis.call('HLEN', K.n)
  if parked > 0 then
    for _, v in ipairs(redis.call('HVALS', K.n)) do
      if v == CANCELLED then
        parked = parked - 1
      end
    end
  end
  local pending = pending_count()
  local due = pending
  if kind ~= 'p' then
    due = pending_due(now)
  end
  local res = {
    pending, due, redis.call('ZCARD', K.r), redis.call('ZCARD', K.f),
    parked, redis.call('ZCARD', K.x), redis.call('HEXISTS', K.l, 'paused'),
  }
  local l = redis.call('HMGET', K.l, 'owner', 'epoch', 'until')
  local until_ms = tonumber(l[3] or '0') or 0
  local owner = l[1] or ''
  if until_ms <= now then
    owner = ''
  end
  res[#res + 1] = owner
  res[#res + 1] = tonumber(l[2] or '0') or 0
  res[#res + 1] = until_ms
  local m = redis.call('HGETALL', K.m)
  for i = 1, #m do
    res[#res + 1] = m[i]
  end
  return res
end

local out = { now }
-- Most slots of a large topic may never have been used: one look at every
-- key of the call answers for all of them.
local any = redis.call('EXISTS', unpack(KEYS)) > 0
for i = 1, slots do
  use_slot(i)
  out[#out + 1] = any and slot_stats() or {}
end
return out
