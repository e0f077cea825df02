-- settle.lua: ends or extends in-flight deliveries of one slot (phase two).
--
-- KEYS: the ten slot keys (see common.lua).
-- ARGV[1] kind ('p' | 'f' | 'r')
-- ARGV[2] max attempts   ARGV[3] backoff base ms   ARGV[4] backoff max ms   ARGV[5] jitter in [0,1)
-- ARGV[6] wake-up channel   ARGV[7] slot number   ARGV[8] dead letters kept per slot (0 = all)
-- ARGV[9] serial mode: the lease owner ('' in parallel mode)   ARGV[10] its epoch
-- ARGV[11..] groups of five: op, merge key, token, number, error text. ops:
--   'a' ack: the message is done and gone
--   'n' nack: failed; retry after <number> ms (-1 = the topic's backoff) or dead after the last attempt
--   'd' dead: failed for good; straight to the dead letters
--   'e' extend: the lease now ends <number> ms from now
--   'r' release: give the message back untouched (the attempt is not counted)
-- A delivery is identified by key and token; a token that is not the key's
-- current delivery (lease expired and rolled back, or taken again) is refused.
-- Acks of distinct keys take a fast path: a few calls for the whole batch.
-- Returns: { now, code per group... } with codes
--    1 done   2 dead   3 superseded by a duplicate that arrived in flight
--   -1 stale: not the current delivery (nothing changed)
--   -2 fenced: serial mode and the caller's lease is not current (nothing changed)
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = ARGV[1]
local cfg = {
  max_attempts = tonumber(ARGV[2]),
  backoff_ms = tonumber(ARGV[3]),
  backoff_max_ms = tonumber(ARGV[4]),
  dead_max = tonumber(ARGV[8]),
}
local jitter = tonumber(ARGV[5])
local channel = ARGV[6]
local slot = ARGV[7]
local now = now_ms()

local bad = check_types()
if bad then
  return bad
end

local n = math.floor((#ARGV - 10) / 5)
local codes = { now }
if not lease_check(ARGV[9], ARGV[10], now) then
  for i = 1, n do
    codes[i + 1] = -2
  end
  return codes
end
local c = counters()
local hm, hs = head(kind)
local requeued = false
local seen = {}
for i = 1, n do
  local key = ARGV[10 + (i - 1) * 5 + 2]
  seen[key] = (seen[key] or 0) + 1
  codes[i + 1] = -1
end

-- Fast path: acks of keys that appear once in this call.
local fast, fast_i, fast_tok = {}, {}, {}
for i = 1, n do
  local base = 10 + (i - 1) * 5
  local key = ARGV[base + 2]
  if ARGV[base + 1] == 'a' and seen[key] == 1 then
    fast[#fast + 1] = key
    fast_i[#fast_i + 1] = i
    fast_tok[#fast_tok + 1] = ARGV[base + 3]
  end
end
if #fast > 0 then
  local fs = redis.call('ZMSCORE', K.f, unpack(fast))
  local metas = redis.call('HMGET', K.a, unpack(fast))
  local ok = {}
  for j, key in ipairs(fast) do
    if fs[j] and metas[j] then
      local _, _, t = meta_parse(metas[j])
      if t == fast_tok[j] then
        ok[#ok + 1] = key
        codes[fast_i[j] + 1] = 1
      end
    end
    seen[key] = 0
  end
  if #ok > 0 then
    redis.call('ZREM', K.f, unpack(ok))
    redis.call('HDEL', K.d, unpack(ok))
    redis.call('HDEL', K.a, unpack(ok))
    c.acked = c.acked + #ok
    if redis.call('HLEN', K.n) > 0 then
      local parked = redis.call('HMGET', K.n, unpack(ok))
      for j, key in ipairs(ok) do
        if parked[j] then
          release_parked(key, parked[j])
          requeued = true
        end
      end
    end
  end
end

-- Slow path: everything else, in order.
for i = 1, n do
  local base = 10 + (i - 1) * 5
  local op = ARGV[base + 1]
  local key = ARGV[base + 2]
  if seen[key] ~= 0 then
    local token = ARGV[base + 3]
    local num = tonumber(ARGV[base + 4]) or -1
    local err = ARGV[base + 5]
    local code = -1
    local meta = nil
    if redis.call('ZSCORE', K.f, key) then
      meta = redis.call('HGET', K.a, key)
    end
    if meta then
      local a, s, t = meta_parse(meta)
      if t == token then
        code = 1
        if op == 'a' then
          redis.call('ZREM', K.f, key)
          redis.call('HDEL', K.d, key)
          redis.call('HDEL', K.a, key)
          c.acked = c.acked + 1
          local parked = redis.call('HGET', K.n, key)
          if parked then
            release_parked(key, parked)
            requeued = true
          end
        elseif op == 'e' then
          if num ~= num or num > MAX_TIME - now then
            num = MAX_TIME - now
          end
          redis.call('ZADD', K.f, 'XX', fmt(now + math.max(num, 1)), key)
        elseif op == 'd' then
          redis.call('ZREM', K.f, key)
          to_dead(key, a, s, redis.call('HGET', K.d, key) or '', err, now, cfg.dead_max, c)
          code = 2
          local parked = redis.call('HGET', K.n, key)
          if parked then
            release_parked(key, parked)
            requeued = true
          end
        elseif op == 'r' then
          redis.call('ZREM', K.f, key)
          local parked = redis.call('HGET', K.n, key)
          if parked then
            redis.call('HDEL', K.d, key)
            release_parked(key, parked)
            c.merged = c.merged + 1
            code = 3
          else
            redis.call('HSET', K.a, key, meta_make(math.max(a - 1, 0), s, '0'))
            redis.call('ZADD', K.q, fmt(s), key)
          end
          requeued = true
        else
          local r = fail(kind, key, err, num, now, cfg, c, (jitter + i * 0.6180339887) % 1)
          if r == 'dead' then
            code = 2
          elseif r == 'superseded' then
            code = 3
          end
          requeued = true
        end
      end
    end
    codes[i + 1] = code
  end
end

flush_counters(c)
if requeued then
  announce(kind, channel, slot, hm, hs, c)
end
return codes
