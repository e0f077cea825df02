-- cancel.lua: cancels messages of one slot by merge key.
-- Includes: layout pending pending_heads pending_resize pending_write records lifecycle
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r'); in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2..] keys: the merge keys to cancel
-- A waiting message (pending, or waiting for a retry) is removed with its payload and
-- attempts. A message in flight cannot be taken back from its handler: its delivery is
-- marked (the mark replaces a duplicate parked behind it, which is dropped), so that a
-- nack, a dead letter, a release or a lease expiry ends it instead of retrying it; its
-- ack still works. A dead letter is left alone (see dead_purge.lua). No notice is
-- sent: removing a message never makes anything due earlier.
-- Returns: { now, code per key..., removed } with codes
--    1 cancelled pending   2 cancelled retry   3 will-not-retry: in flight, marked now
--    4 will-not-retry: in flight, was marked already   0 absent   5 dead: only a dead letter (left alone)
--   and removed: the messages removed (waiting ones, and duplicates parked behind
--   in-flight ones): a bounded topic's room comes back for them
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = pending_use(ARGV[1])
local now = now_ms()
local bad = check_types()
if bad then
  return bad
end

local c = counters()
local codes = { now }
local removed = 0
for i = 2, #ARGV do
  local key = ARGV[i]
  local code = 0
  if redis.call('HEXISTS', K.d, key) == 1 then
    local qs = pending_score(key)
    if qs then
      pending_remove({ key })
      code = 1
      local meta = redis.call('HGET', K.a, key)
      if kind ~= 'p' and meta and meta_error(meta) and tonumber(qs) > now then
        code = 2
      end
    elseif redis.call('ZREM', K.r, key) == 1 then
      code = 2
    end
    if code > 0 then
      redis.call('HDEL', K.d, key)
      redis.call('HDEL', K.a, key)
      c.cancelled = c.cancelled + 1
      removed = removed + 1
    else
      -- in flight: mark it; a duplicate parked behind it is dropped
      local parked = redis.call('HGET', K.n, key)
      code = (parked and parked_cancelled(parked)) and 4 or 3
      if parked and parked_parse(parked) then
        c.cancelled = c.cancelled + 1 -- the duplicate parked behind it goes
        removed = removed + 1
      end
      redis.call('HSET', K.n, key, CANCELLED)
    end
  elseif redis.call('HEXISTS', K.X, key) == 1 then
    code = 5
  end
  codes[#codes + 1] = code
end
flush_counters(c)
codes[#codes + 1] = removed
return codes
