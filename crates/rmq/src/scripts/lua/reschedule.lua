-- reschedule.lua: gives a waiting message of one slot a new due time or priority.
-- Includes: layout pending pending_heads pending_resize pending_write records notify
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r'); in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2] channel: for wake-up notices   ARGV[3] slot: its number
-- ARGV[4] key: the merge key
-- ARGV[5] spec: the new priority (0..2097151, 'p'), or the new due time in unix ms or
--         '+<delay ms>' (time kinds)
-- ARGV[6] tolerance_ms: a due time older than now - tolerance is refused
-- The payload and attempts stay. A priority message goes to the back of its new
-- priority's FIFO; one waiting out a retry backoff keeps waiting and then comes back
-- with its new priority. A time-based message is due at its new time (a retry too:
-- the new time replaces its backoff). A duplicate parked behind an in-flight delivery
-- of the key is rescheduled instead (the delivery itself cannot be).
-- Returns: { now, code, new score } with codes
--    1 rescheduled pending   2 rescheduled retry   3 rescheduled the duplicate parked behind in flight
--   -1 absent (no waiting message of the key)   -2 in flight with nothing waiting behind it
--   -3 due time in the past   -4 invalid spec
-- Nothing is written unless the code is positive.
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = pending_use(ARGV[1])
local channel = ARGV[2]
local slot = ARGV[3]
local key = ARGV[4]
local spec = ARGV[5]
local tolerance = tonumber(ARGV[6]) or 0
local now = now_ms()

local v
if kind == 'p' then
  v = tonumber(spec)
  if not v or v ~= v or v ~= math.floor(v) or v < 0 or v > 2097151 then
    return { now, -4, false }
  end
else
  if string.sub(spec, 1, 1) == '+' then
    v = tonumber(string.sub(spec, 2))
    if not v or v ~= v or v < 0 or v ~= math.floor(v) or now + v > MAX_TIME then
      return { now, -4, false }
    end
    v = now + v
  else
    v = tonumber(spec)
    if not v or v ~= v or v ~= math.floor(v) or v > MAX_TIME then
      return { now, -4, false }
    end
    if v < now - tolerance then
      return { now, -3, false }
    end
  end
end
local bad = check_types()
if bad then
  return bad
end

local function new_score()
  if kind == 'p' then
    local seq = redis.call('HINCRBY', K.m, 'seq', 1)
    return priority_score(v, seq)
  end
  return v
end

local hm, hs = head(kind)
local code, score
if redis.call('HEXISTS', K.d, key) == 0 then
  return { now, -1, false }
end
local meta = redis.call('HGET', K.a, key)
if pending_score(key) then
  score = new_score()
  pending_put({ key }, { score })
  code = 1
  if meta then
    local a = meta_parse(meta)
    local err = meta_error(meta)
    redis.call('HSET', K.a, key, meta_make(a, score, err, meta_origin(meta)))
    if kind ~= 'p' and err then
      code = 2
    end
  end
elseif redis.call('ZSCORE', K.r, key) then
  -- a priority retry waiting out its backoff: its place lives in a
  score = new_score()
  local a = meta and meta_parse(meta) or 0
  redis.call('HSET', K.a, key, meta_make(a, score, meta and meta_error(meta), meta and meta_origin(meta)))
  code = 2
else
  local parked = redis.call('HGET', K.n, key)
  local s, p
  if parked then
    s, p = parked_parse(parked)
  end
  if not s then
    return { now, -2, false }
  end
  local mark = parked_cancelled(parked) and CANCELLED or ''
  score = new_score()
  redis.call('HSET', K.n, key, mark .. parked_make(score, p))
  code = 3
end
announce(kind, channel, slot, hm, hs)
return { now, code, score }
