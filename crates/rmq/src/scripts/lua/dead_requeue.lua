-- dead_requeue.lua: gives dead letters of one slot a fresh start.
-- Includes: layout pending pending_heads pending_resize pending_write records notify
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r'); in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2] channel: for wake-up notices   ARGV[3] slot: its number
-- ARGV[4] all: '1' for all dead letters (up to the limit), '0' for the one merge key in ARGV[6]
-- ARGV[5] limit
-- ARGV[6] key: the merge key (when ARGV[4] is '0')
-- ARGV[7] before_ms: all: only letters that died at or before this time (ms; '' = now). A caller
--         that requeues a slot in several calls passes the first call's time, so that a
--         message requeued and dead again meanwhile is not requeued twice. (Within one
--         call nothing can die again: a slot with up to `limit` letters is done at once.)
-- A requeued message starts again with no attempts counted. A priority message
-- keeps its priority and FIFO place; a time-based message is due at once. When
-- the same key is already pending (or in flight with a duplicate behind it), the
-- newer pending message wins and the dead letter is merged into it.
-- Returns: { requeued, merged, the time bound used (ms), server now (ms),
--            then per dead letter taken: merge key, code, score }
--   code 1 requeued (pending)   2 merged into the message of its key waiting
--   3 requeued behind the in-flight delivery of its key   4 merged into the message waiting behind it
--   score: its order score as stored (priority * 2^32 + FIFO part, or due ms), zero when
--   merged into a retry-waiting message (its order lives in a)
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = pending_use(ARGV[1])
local channel = ARGV[2]
local slot = ARGV[3]
local all = ARGV[4] == '1'
local limit = tonumber(ARGV[5])
local now = now_ms()

local bad = check_types()
if bad then
  return bad
end

local keys
local before = tonumber(ARGV[7] or '') or now
if all then
  keys = redis.call('ZRANGEBYSCORE', K.x, '-inf', fmt(before), 'LIMIT', 0, limit)
else
  keys = { ARGV[6] }
end
local hm, hs = head(kind)
local requeued, merged = 0, 0
local each = {}
local function told(key, code, score)
  each[#each + 1] = key
  each[#each + 1] = code
  each[#each + 1] = score or 0
end
for _, key in ipairs(keys) do
  local rec = redis.call('HGET', K.X, key)
  if rec then
    local _, s, _, _, _, p = dead_parse(rec)
    if kind ~= 'p' then
      s = now
    end
    redis.call('HDEL', K.X, key)
    redis.call('ZREM', K.x, key)
    local held = redis.call('HEXISTS', K.d, key) == 1
    local pending_s = pending_score(key)
    local waiting = pending_s or redis.call('ZSCORE', K.r, key)
    if held and not waiting then
      -- in flight: wait behind it
      local parked = redis.call('HGET', K.n, key)
      local parked_score = parked and parked_parse(parked)
      if parked_score then
        merged = merged + 1
        told(key, 4, parked_score)
      else
        local mark = parked and CANCELLED or ''
        redis.call('HSET', K.n, key, mark .. parked_make(s, p))
        requeued = requeued + 1
        told(key, 3, s)
      end
    elseif held then
      merged = merged + 1
      told(key, 2, tonumber(pending_s))
    else
      redis.call('HSET', K.d, key, p)
      redis.call('HDEL', K.a, key)
      pending_put({ key }, { s })
      requeued = requeued + 1
      told(key, 1, s)
    end
  end
end
if merged > 0 then
  redis.call('HINCRBY', K.m, 'merged', merged)
end
if requeued > 0 then
  announce(kind, channel, slot, hm, hs)
end
local reply = { requeued, merged, before, now }
for i = 1, #each do
  reply[4 + i] = each[i]
end
return reply
