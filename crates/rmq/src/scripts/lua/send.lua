-- send.lua: adds messages to one slot, merging duplicates by merge key.
--
-- KEYS: the eight slot keys (see common.lua).
-- ARGV[1] kind: 'p' priority | 'f' fixed-time | 'r' range-merge
-- ARGV[2] max payload bytes
-- ARGV[3] past tolerance ms (fixed-time: a due time older than now - tolerance is refused)
-- ARGV[4] wake-up channel
-- ARGV[5] slot number
-- ARGV[6..] triples: merge key, spec, payload. spec is the priority ('p'),
--           the due time in unix ms or '+<delay ms>' ('f'), or the range in ms ('r').
-- Returns: { server now ms, code per message... } with codes
--    1 new   2 merged into a pending message   3 new, waiting behind the same key in flight
--    4 merged into the message waiting behind the same key in flight
--   -1 due time in the past   -2 payload too large   -3 invalid spec
-- Refused messages write nothing; the others are written in order.
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = ARGV[1]
local max_payload = tonumber(ARGV[2])
local tolerance = tonumber(ARGV[3])
local channel = ARGV[4]
local slot = ARGV[5]
local now = now_ms()

local bad = check_types()
if bad then
  return bad
end

-- Validate everything first.
local n = math.floor((#ARGV - 5) / 3)
local specs = {}
local codes = {}
for i = 1, n do
  local spec = ARGV[5 + 3 * i - 1]
  local payload = ARGV[5 + 3 * i]
  local code = 0
  local v
  if #payload > max_payload then
    code = -2
  elseif kind == 'f' then
    if string.sub(spec, 1, 1) == '+' then
      v = tonumber(string.sub(spec, 2))
      if v and v >= 0 then
        v = now + v
      else
        v = nil
      end
    else
      v = tonumber(spec)
      if v and v < now - tolerance then
        code = -1
      end
    end
  else
    v = tonumber(spec)
    if v and (v ~= math.floor(v) or v < 0 or (kind == 'r' and v <= 0) or (kind == 'p' and v > 2097151)) then
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
for i = 1, n do
  if codes[i] == 0 then
    local key = ARGV[5 + 3 * i - 2]
    local payload = ARGV[5 + 3 * i]
    local v = specs[i]
    c.sent = c.sent + 1
    if redis.call('ZSCORE', K.f, key) then
      local parked = redis.call('HGET', K.n, key)
      if parked then
        local _, s = rec_parse(parked)
        redis.call('HSET', K.n, key, rec_make(0, merged_score(s, v), '0', payload))
        codes[i] = 4
        c.merged = c.merged + 1
      else
        redis.call('HSET', K.n, key, rec_make(0, new_score(v), '0', payload))
        codes[i] = 3
      end
    else
      local old = redis.call('HGET', K.d, key)
      if old then
        -- pending (in q) or waiting for a retry (in r): merge
        local a, s = rec_parse(old)
        local ns = merged_score(s, v)
        redis.call('HSET', K.d, key, rec_make(a, ns, '0', payload))
        if ns ~= s and redis.call('ZSCORE', K.q, key) then
          redis.call('ZADD', K.q, fmt(ns), key)
        end
        codes[i] = 2
        c.merged = c.merged + 1
      else
        local s = new_score(v)
        redis.call('ZADD', K.q, fmt(s), key)
        redis.call('HSET', K.d, key, rec_make(0, s, '0', payload))
        codes[i] = 1
      end
    end
  end
end

if kind == 'p' and c.sent > 0 then
  redis.call('HSET', K.m, 'seq', fmt(seq))
end
flush_counters(c)
if c.sent > 0 then
  announce(kind, channel, slot, hm, hs)
end
table.insert(codes, 1, now)
return codes
