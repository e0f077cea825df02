-- firsts.lua: where each slot's queues begin, for tools that work on many
-- slots (peek, dead letters, taking by hand) and must not call every slot
-- (reads only).
-- Includes: layout
--
-- KEYS: the ten slot keys (see layout.lua) of each slot, slot after slot
--   (more than one slot on a single Redis node only).
-- ARGV[1] kind ('p' | 'f' | 'r')
-- ARGV[2] which: 'pending' (peek), 'dead' (the dead-letter tools) or 'all'
--   (taking by hand): the sets not asked for answer false
-- Returns: { now, then per slot: the score of its next pending message in
--            consumption order (priority: the highest), the time of death
--            (ms) of its oldest dead letter, its first retry time (ms), its
--            first lease deadline (ms) } with false (nil) for an empty set.
-- Error reply RMQ_BADARG when KEYS are not whole slots or which is unknown.

local kind, which = ARGV[1], ARGV[2]
local slots = slots_in_keys()
if not slots then
  return redis.error_reply('RMQ_BADARG firsts: ten keys per slot')
end
if which ~= 'pending' and which ~= 'dead' and which ~= 'all' then
  return redis.error_reply('RMQ_BADARG firsts: unknown set ' .. tostring(which))
end
local pending, dead = which ~= 'dead', which ~= 'pending'
local rest = which == 'all'

local function first(zset, rev)
  local r
  if rev then
    r = redis.call('ZRANGE', zset, 0, 0, 'REV', 'WITHSCORES')
  else
    r = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  end
  return r[2] or false
end

local out = { now_ms() }
-- Most slots of a large topic may hold nothing: one look at every key of
-- the call answers for all of them.
local any = redis.call('EXISTS', unpack(KEYS)) > 0
for i = 1, slots do
  use_slot(i)
  out[#out + 1] = any and pending and first(K.q, kind == 'p')
  out[#out + 1] = any and dead and first(K.x, false)
  out[#out + 1] = any and rest and first(K.r, false)
  out[#out + 1] = any and rest and first(K.f, false)
end
return out
