-- get.lua: where one merge key is in one slot, and everything about it (reads only).
-- Includes: layout pending pending_heads pending_resize pending_write records
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r')   ARGV[2] key: the merge key
-- Returns: { now, state, payload, attempts, score, next_ms, error, token, epoch, cancelled,
--            parked score, parked payload, dead attempts, dead ms, deaths, dead error, dead payload }
-- state is one of
--   'pending'  waiting to be taken; score is its place (priority and FIFO part, or due
--              time); attempts counts earlier deliveries; error is the last one's, if any
--   'retry'    waiting after a failed attempt: next_ms is when it may be taken again
--              (priority: when its backoff ends; time kinds: its due time), error the failure's
--   'flight'   being handled: attempts is this delivery's, next_ms its lease deadline,
--              token the delivery's, epoch the slot lease's (serial mode), cancelled 1 when
--              it was cancelled (it will not be retried); a duplicate parked behind it gives
--              the parked fields
--   'absent'   no live message of the key (it may still have a dead letter)
-- The dead fields describe the key's dead letter, when it has one (a key can be dead and
-- live at once: a new message of the key after its death). Missing values are false.
-- Finding the delivery of a key in flight scans the slot's in-flight set (as many
-- entries as the slot has deliveries out).

local kind = pending_use(ARGV[1])
local key = ARGV[2]
local now = now_ms()
local bad = check_types()
if bad then
  return bad
end

local state, payload, attempts, score = 'absent', false, 0, false
local next_ms, err, token, epoch, cancelled = false, false, false, false, 0
local parked_score, parked_payload = false, false

local p = redis.call('HGET', K.d, key)
if p then
  payload = p
  local qs = pending_score(key)
  local rs = redis.call('ZSCORE', K.r, key)
  local meta = redis.call('HGET', K.a, key)
  if meta then
    local a, s = meta_parse(meta)
    attempts, score = a or 0, s or false
    err = meta_error(meta) or false
  end
  if rs then
    state, next_ms = 'retry', tonumber(rs)
  elseif qs then
    score = tonumber(qs)
    state = 'pending'
    if kind ~= 'p' and err and score > now then
      state, next_ms = 'retry', score
    end
  else
    state = 'flight'
    local suffix = '|' .. key
    local out = redis.call('ZRANGE', K.f, 0, -1, 'WITHSCORES')
    for i = 1, #out, 2 do
      local id = out[i]
      if #id >= #suffix and string.sub(id, -#suffix) == suffix then
        local t, a, s, k = flight_parse(id)
        if k == key then
          token, attempts, score, next_ms = tonumber(t), a, s, tonumber(out[i + 1])
          break
        end
      end
    end
    local l = redis.call('HMGET', K.l, 'owner', 'epoch', 'until')
    if l[1] and l[1] ~= '' and tonumber(l[3] or '0') > now then
      epoch = tonumber(l[2])
    end
    local parked = redis.call('HGET', K.n, key)
    if parked then
      if parked_cancelled(parked) then
        cancelled = 1
      end
      local s, pp = parked_parse(parked)
      if s then
        parked_score, parked_payload = s, pp
      end
    end
  end
end

local res = { now, state, payload, attempts, score, next_ms, err, token, epoch, cancelled,
  parked_score, parked_payload }
local dead = redis.call('HGET', K.X, key)
if dead then
  local da, _, dm, dc, de, dp = dead_parse(dead)
  for _, v in ipairs({ da, dm, dc, de, dp }) do
    res[#res + 1] = v
  end
end
return res
