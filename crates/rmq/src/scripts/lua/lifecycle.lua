-- lifecycle.lua: what happens to a message after a delivery ends: counters,
-- a duplicate that waited behind it, retries with backoff, dead letters.

-- Counters are summed in a table and written once per script call.
local function counters()
  return { sent = 0, merged = 0, delivered = 0, acked = 0, retried = 0, dead = 0, dropped = 0, cancelled = 0 }
end

local function flush_counters(c)
  for name, v in pairs(c) do
    if v ~= 0 and name ~= 'retry_at' then
      redis.call('HINCRBY', K.m, name, fmt(v))
    end
  end
end

-- Moves a duplicate that waited behind an in-flight delivery into the
-- pending set (a cancel mark is only removed). The caller has already
-- removed the in-flight entry.
local function release_parked(key, parked)
  redis.call('HDEL', K.n, key)
  local s, p = parked_parse(parked)
  if not s then
    return
  end
  redis.call('HDEL', K.a, key)
  redis.call('HSET', K.d, key, p)
  pending_put({ key }, { s })
end

-- Ends an in-flight message that was cancelled (its entry in f already
-- removed): nothing of it stays; a duplicate parked behind it moves in.
local function end_cancelled(key, parked, c)
  redis.call('HDEL', K.d, key)
  redis.call('HDEL', K.a, key)
  release_parked(key, parked)
  c.cancelled = c.cancelled + 1
end

-- Drops dead letters that died before now - ttl (at most 100 per call;
-- the next call of the slot goes on), counted as dropped. (ttl 0: none.)
local function trim_dead(ttl, now, c)
  if not ttl or ttl <= 0 then
    return
  end
  local old = redis.call('ZRANGEBYSCORE', K.x, '-inf', now - ttl, 'LIMIT', '0', '100')
  if #old > 0 then
    redis.call('ZREM', K.x, unpack(old))
    redis.call('HDEL', K.X, unpack(old))
    c.dropped = c.dropped + #old
  end
end

-- Moves an in-flight message to the dead letters (merging with an older
-- dead letter of the same key, whose death count it keeps).
local function to_dead(key, a, s, payload, err, now, cfg, c)
  local dead_max = cfg.dead_max
  trim_dead(cfg.dead_ttl, now, c)
  local old = redis.call('HGET', K.X, key)
  local deaths = 1
  if old then
    local _, _, _, oc = dead_parse(old)
    deaths = oc + 1
  end
  redis.call('HSET', K.X, key, dead_make(a, s, now, deaths, err, payload))
  redis.call('ZADD', K.x, fmt(now), key)
  redis.call('HDEL', K.d, key)
  redis.call('HDEL', K.a, key)
  c.dead = c.dead + 1
  if dead_max > 0 then
    local over = redis.call('ZCARD', K.x) - dead_max
    if over > 0 then
      local gone = redis.call('ZPOPMIN', K.x, over)
      for i = 1, #gone, 2 do
        redis.call('HDEL', K.X, gone[i])
      end
      c.dropped = c.dropped + over
    end
  end
end

-- Exponential backoff with equal jitter, bounded by max_ms.
local function backoff(attempts, base_ms, max_ms, jitter)
  local d = base_ms * math.pow(2, math.max(attempts - 1, 0))
  if d > max_ms then
    d = max_ms
  end
  return math.floor(d / 2 + d / 2 * jitter)
end

-- Ends an in-flight delivery (its id, current) as a failure: dead letter
-- after the last attempt, else a retry that keeps the kind's ordering after
-- a backoff. A duplicate parked behind it supersedes it (the newer payload
-- wins); a cancelled one ends. Returns 'dead', 'superseded', 'cancelled' or 'retry'.
-- at_place: the retry goes back at once with the score it was taken with,
-- ahead of every message that came after it (serial mode, when the owner
-- that took it lost the slot: the entity's order holds across the
-- handover); the attempt still counts.
local function fail(kind, id, err, delay, now, cfg, c, jitter, at_place)
  local _, a, s, key, origin = flight_parse(id)
  redis.call('ZREM', K.f, id)
  if not key then
    -- Written by an older version: the member is the key, attempts and score are in a.
    key = id
    local meta = redis.call('HGET', K.a, key)
    if meta then
      a, s = meta_parse(meta)
    end
  end
  local p = redis.call('HGET', K.d, key)
  local parked = redis.call('HGET', K.n, key)
  if parked and parked_cancelled(parked) then
    end_cancelled(key, parked, c)
    return 'cancelled'
  end
  if delay ~= delay or delay > MAX_TIME - now then
    delay = MAX_TIME - now
  end
  if p then
    local old_dead = redis.call('HGET', K.X, key)
    if old_dead then
      dead_parse(old_dead)
    end
  end
  if not p or not a then
    redis.call('HDEL', K.a, key)
    redis.call('HDEL', K.d, key)
    if parked then
      release_parked(key, parked)
    end
    return 'superseded'
  end
  if a >= cfg.max_attempts then
    to_dead(key, a, s, p, err, now, cfg, c)
    if parked then
      release_parked(key, parked)
    end
    return 'dead'
  end
  c.retried = c.retried + 1
  if parked then
    redis.call('HDEL', K.d, key)
    release_parked(key, parked)
    c.merged = c.merged + 1
    return 'superseded'
  end
  if at_place then
    redis.call('HSET', K.a, key, meta_make(a, s, err, origin))
    pending_put({ key }, { s })
    return 'retry'
  end
  if delay < 0 then
    delay = backoff(a, cfg.backoff_ms, cfg.backoff_max_ms, jitter)
  end
  if kind == 'p' then
    redis.call('HSET', K.a, key, meta_make(a, s, err, origin))
    if delay > 0 then
      redis.call('ZADD', K.r, fmt(now + delay), key)
      c.retry_at = math.min(c.retry_at or (now + delay), now + delay)
    else
      pending_put({ key }, { s })
    end
  else
    local ns = now + delay
    redis.call('HSET', K.a, key, meta_make(a, ns, err, origin))
    pending_put({ key }, { ns })
  end
  return 'retry'
end
