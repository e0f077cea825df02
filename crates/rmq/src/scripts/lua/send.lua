-- send.lua: adds messages to one slot, merging duplicates by merge key.
-- Includes: layout pending pending_heads pending_resize pending_write records notify lifecycle
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind: 'p' priority | 'f' fixed-time | 'r' range-merge; in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2] max_payload: bytes a payload may have at most
-- ARGV[3] tolerance_ms: fixed-time: a due time older than now - tolerance is refused
-- ARGV[4] channel: for wake-up notices
-- ARGV[5] slot: its number
-- ARGV[6] room: new messages this call may add at most (a bounded topic's
--         room reserved by the caller, room.lua); -1 = unbounded
-- ARGV[7..] triples: merge key, spec, payload. spec is the priority ('p'),
--           the due time in unix ms or '+<delay ms>' ('f'), or the range in ms ('r').
-- Returns: { server now ms, code per message..., score per message... } with codes
--    1 new   2 merged into a pending message   3 new, waiting behind the same key in flight
--          (also when that delivery was cancelled: the new message waits behind it all the same)
--    4 merged into the message waiting behind the same key in flight
--   -1 due time in the past   -2 payload too large   -3 invalid spec
--   -4 full: a new message beyond the room (merges are never refused)
-- and each message's order score as stored once it was written (the merged
-- message's, or the one waiting behind the in-flight delivery): a priority
-- topic's priority * 2^32 + FIFO part, a time-based topic's due time in
-- ms; zero when the message was refused.
-- Refused messages write nothing; the others are written in order.
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = pending_use(ARGV[1])
local max_payload = tonumber(ARGV[2])
local tolerance = tonumber(ARGV[3])
local channel = ARGV[4]
local slot = ARGV[5]
local room = tonumber(ARGV[6]) or -1
local now = now_ms()

-- Validate everything first.
local n = math.floor((#ARGV - 6) / 3)
local specs = {}
local codes = {}
for i = 1, n do
  local spec = ARGV[6 + 3 * i - 1]
  local payload = ARGV[6 + 3 * i]
  local code = 0
  local v
  if #payload > max_payload then
    code = -2
  elseif kind == 'f' then
    if string.sub(spec, 1, 1) == '+' then
      v = tonumber(string.sub(spec, 2))
      if v and v == v and v >= 0 and v == math.floor(v) and now + v <= MAX_TIME then
        v = now + v
      else
        v = nil
      end
    else
      v = tonumber(spec)
      if v and (v ~= v or v ~= math.floor(v) or v > MAX_TIME) then
        v = nil
      elseif v and v < now - tolerance then
        code = -1
      end
    end
  else
    v = tonumber(spec)
    if v and (v ~= v or v ~= math.floor(v) or v < 0 or (kind == 'r' and now + v > MAX_TIME) or (kind == 'r' and v <= 0) or (kind == 'p' and v > 2097151)) then
      v = nil
    end
  end
  if code == 0 and not v then
    code = -3
  end
  specs[i] = v
  codes[i] = code
end

local seq
if kind == 'p' then
  seq = tonumber(redis.call('HGET', K.m, 'seq') or '0')
  checked('m')
end

local function new_score(v)
  if kind == 'p' then
    seq = seq + 1
    return priority_score(v, seq)
  elseif kind == 'f' then
    return v
  end
  return now + v
end

local function merged_score(old, v)
  if kind == 'p' then
    return priority_reorder(old, v)
  elseif kind == 'f' then
    return v
  end
  return old
end

local hm, hs = head(kind)
local c = counters()

-- Where each distinct key is now: in flight, pending (q) or waiting for a
-- retry (r). Read with one call per set, then updated locally as the batch
-- merges into itself.
local ukeys, state = {}, {}
for i = 1, n do
  if codes[i] == 0 then
    local key = ARGV[6 + 3 * i - 2]
    if not state[key] then
      state[key] = {}
      ukeys[#ukeys + 1] = key
    end
  end
end
if #ukeys > 0 then
  -- A key d holds no payload of is new: neither pending, nor waiting for a
  -- retry, nor in flight. Only the others are looked up in the pending set
  -- (one read per bucket they hash to) and in r.
  local held = redis.call('HMGET', K.d, unpack(ukeys))
  checked('d')
  local known = {}
  for j, key in ipairs(ukeys) do
    if held[j] then
      known[#known + 1] = key
    end
  end
  local qs = pending_scores(known)
  local rs = {}
  if kind == 'p' and #known > 0 and redis.call('ZCARD', K.r) > 0 then
    rs = redis.call('ZMSCORE', K.r, unpack(known))
  end
  -- Neither pending nor waiting for a retry, yet holding a payload: in
  -- flight (while f holds anything; else a leftover, sent again as new).
  local flying = nil
  for j, key in ipairs(known) do
    local st = state[key]
    if qs[j] then
      st.where = 'q'
      st.score = tonumber(qs[j])
    elseif rs[j] then
      st.where = 'r'
    else
      if flying == nil then
        flying = redis.call('ZCARD', K.f) > 0
      end
      st.where = flying and 'f' or nil
    end
  end
end

-- q and d were read above (and r where it matters); nothing is written yet.
-- New keys and merges into pending messages write q, d and m; a key in
-- flight or waiting for a retry also touches n or a: then check every key.
local any_special = false
for _, key in ipairs(ukeys) do
  local w = state[key].where
  if w == 'f' or w == 'r' then
    any_special = true
  end
end
local bad = check_all_or(any_special, 'd', 'm')
if bad then
  return bad
end

local zadd, dset, nset = {}, {}, {}
local scores = {}
local zpos, dpos, npos = {}, {}, {}
local function put(list, pos, key, value)
  local at = pos[key]
  if at then
    list[at + 1] = value
  else
    list[#list + 1] = key
    pos[key] = #list
    list[#list + 1] = value
  end
end

for i = 1, n do
  if codes[i] == 0 then
    local key = ARGV[6 + 3 * i - 2]
    local payload = ARGV[6 + 3 * i]
    local v = specs[i]
    local st = state[key]
    if st.where == 'f' and st.parked == nil then
      local parked = redis.call('HGET', K.n, key)
      st.mark = parked and parked_cancelled(parked) and CANCELLED or ''
      st.parked = parked and parked_parse(parked) or false
    end
    -- A new message needs room; a merge adds nothing.
    local adds = (st.where == 'f' and not st.parked) or not st.where
    if adds and room == 0 then
      codes[i] = -4
    elseif st.where == 'f' then
      if adds and room > 0 then
        room = room - 1
      end
      c.sent = c.sent + 1
      if st.parked then
        st.parked = merged_score(st.parked, v)
        scores[i] = st.parked
        codes[i] = 4
        c.merged = c.merged + 1
      else
        st.parked = new_score(v)
        scores[i] = st.parked
        codes[i] = 3
      end
      put(nset, npos, key, st.mark .. parked_make(st.parked, payload))
    elseif st.where == 'q' then
      c.sent = c.sent + 1
      local ns = merged_score(st.score, v)
      if ns ~= st.score then
        st.score = ns
        put(zadd, zpos, key, ns)
      end
      scores[i] = ns
      put(dset, dpos, key, payload)
      codes[i] = 2
      c.merged = c.merged + 1
    elseif st.where == 'r' then
      c.sent = c.sent + 1
      -- a priority retry waiting out its backoff: its place lives in a
      local meta = redis.call('HGET', K.a, key)
      if meta then
        local a, s = meta_parse(meta)
        scores[i] = merged_score(s, v)
        redis.call('HSET', K.a, key, meta_make(a, scores[i], meta_error(meta), meta_origin(meta)))
      end
      put(dset, dpos, key, payload)
      codes[i] = 2
      c.merged = c.merged + 1
    else
      if room > 0 then
        room = room - 1
      end
      c.sent = c.sent + 1
      local sc = new_score(v)
      st.where = 'q'
      st.score = sc
      scores[i] = sc
      put(zadd, zpos, key, sc)
      put(dset, dpos, key, payload)
      codes[i] = 1
    end
  end
end

local put_keys, put_scores = {}, {}
for j = 1, #zadd, 2 do
  put_keys[#put_keys + 1] = zadd[j]
  put_scores[#put_scores + 1] = zadd[j + 1]
end
pending_put(put_keys, put_scores)
if #dset > 0 then
  bulk('HSET', K.d, dset, 2)
end
if #nset > 0 then
  bulk('HSET', K.n, nset, 2)
end

if kind == 'p' and c.sent > 0 then
  redis.call('HSET', K.m, 'seq', fmt(seq))
end
flush_counters(c)
if c.sent > 0 then
  announce(kind, channel, slot, hm, hs)
end
local reply = { now }
for i = 1, n do
  reply[1 + i] = codes[i]
  reply[1 + n + i] = scores[i] or 0
end
return reply
