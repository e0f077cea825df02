-- pause.lua: pauses or resumes one slot of a topic.
-- Includes: layout notify
--
-- KEYS: the ten slot keys (see layout.lua); l (the lease hash, which holds the flag) is written.
-- ARGV[1] op: 'pause' | 'resume'
-- ARGV[2] kind ('p' | 'f' | 'r')   ARGV[3] channel: for wake-up notices   ARGV[4] slot: its number
-- A paused slot gives nothing to any consumer (pop.lua reads the flag with the lease, in
-- the same call); sends, acks and every other settle go on, and expired leases are
-- still rolled back. A resume clears the flag and announces the slot's head and next
-- retry, so that idle consumers take again at once.
-- Returns: { now, 1 if the slot was paused before the call, else 0 }
-- Error reply RMQ_WRONGTYPE when l, q or r holds a foreign type (nothing written);
-- RMQ_BADARG for an unknown op.

local op = ARGV[1]
local kind, channel, slot = ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
if op ~= 'pause' and op ~= 'resume' then
  return redis.error_reply('RMQ_BADARG unknown pause op ' .. tostring(op))
end
local bad = check_keys('l', 'q', 'r')
if bad then
  return bad
end
local was = redis.call('HEXISTS', K.l, 'paused')
if op == 'pause' then
  redis.call('HSET', K.l, 'paused', '1')
else
  redis.call('HDEL', K.l, 'paused')
  if was == 1 then
    local retry_at = first_score(K.r)
    announce(kind, channel, slot, nil, nil, { retry_at = retry_at or nil })
  end
end
return { now, was }
