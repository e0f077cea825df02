-- common.lua: helpers shared by every slot script. It is prepended to each
-- script body at build time (after the `#!lua` line), so the helpers are
-- local to each script and nothing is global.
--
-- Every slot script receives the same ten keys, all under one hash tag:
--   KEYS[1] q  ZSET  pending messages: member = merge key, score = order
--   KEYS[2] d  HASH  merge key -> payload of a pending, retry-waiting or in-flight message
--   KEYS[3] f  ZSET  in flight: member = delivery id "<token>,<attempts>,<score>|<key>",
--                    score = lease deadline (ms). The id carries everything a
--                    settle needs, so taking a message writes one zset member and
--                    nothing else; token is unique per slot (counter `tok`).
--   KEYS[4] n  HASH  merge key -> record of a duplicate that arrived while in flight
--   KEYS[5] m  HASH  slot counters: sent merged delivered acked retried dead dropped seq tok
--   KEYS[6] r  ZSET  priority retries waiting out their backoff: score = retry time (ms)
--   KEYS[7] x  ZSET  dead letters: member = merge key, score = time of death (ms)
--   KEYS[8] X  HASH  merge key -> dead-letter record
--   KEYS[9] a  HASH  merge key -> "<attempts>,<score>" of a message that was
--                    delivered and is waiting again (pending in q or a retry in r);
--                    score is its place in q (priority*2^32 + FIFO part, or due
--                    time in ms). A never-delivered or in-flight message has no
--                    entry here, so a pending message costs one zset member and
--                    one hash field holding just its payload.
-- A key is in flight when d holds it and neither q nor r does.
--   KEYS[10] l HASH  serial mode: the slot's lease: owner, epoch, until (ms)
-- A parked duplicate (n) is "<score>|<payload>".
-- A dead-letter record is "<attempts>,<score>,<dead_ms>,<deaths>,<errlen>|<error><payload>".
--
-- Scripts check every precondition (key types, arguments) before their
-- first write, because a Lua error does not roll back earlier writes. A key
-- counts as checked once a typed read of it succeeded (a read of a foreign
-- type raises WRONGTYPE before anything was written); the hot paths read most
-- of their keys anyway and check only the rest (check_keys), other paths check
-- all ten (check_types).

local TWO32 = 4294967296
-- Largest due time or delay end accepted (ms): scores stay exact doubles and
-- fit Redis' integer replies (2^53 - 1).
local MAX_TIME = 9007199254740991

local K = {
  q = KEYS[1], d = KEYS[2], f = KEYS[3], n = KEYS[4],
  m = KEYS[5], r = KEYS[6], x = KEYS[7], X = KEYS[8], a = KEYS[9], l = KEYS[10],
}

-- A whole number as decimal digits. '%d' formats integers directly, which
-- costs a fraction of Lua's float formatting ('%.14g' or '%.0f').
local function fmt(n)
  if n > -2 ^ 62 and n < 2 ^ 62 and n == math.floor(n) then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local TYPE_OF = { q = 'zset', d = 'hash', f = 'zset', n = 'hash', m = 'hash', r = 'zset', x = 'zset', X = 'hash', a = 'hash', l = 'hash' }

-- Refuses to run (before any write) when one of the named queue keys
-- ('d', 'm', ...) holds a foreign type.
local function check_keys(...)
  for _, name in ipairs({ ... }) do
    local key, expected = K[name], TYPE_OF[name]
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' and t ~= expected then
      return redis.error_reply('RMQ_WRONGTYPE ' .. key .. ' holds a ' .. t .. ', expected a ' .. expected)
    end
  end
  return nil
end

-- The same for all ten keys.
local function check_types()
  return check_keys('q', 'd', 'f', 'n', 'm', 'r', 'x', 'X', 'a', 'l')
end

-- All ten keys when `all`, else only the named ones (those the caller's
-- path writes without having read them first).
local function check_all_or(all, ...)
  if all then
    return check_types()
  end
  return check_keys(...)
end

local function meta_make(attempts, score)
  return attempts .. ',' .. fmt(score)
end

-- Returns attempts, score (a third field, from older versions, is ignored).
local function meta_parse(v)
  local a, s = string.match(v, '^(%d+),(%-?%d+)')
  return tonumber(a), tonumber(s)
end

-- A delivery id (the in-flight member): score is kept as the string it was
-- read as, so the id needs no number formatting.
local function flight_make(token, attempts, score, key)
  if attempts == 1 then
    return fmt(token) .. ',1,' .. score .. '|' .. key
  end
  return fmt(token) .. ',' .. fmt(attempts) .. ',' .. score .. '|' .. key
end

-- The merge key of a delivery id (nil for a malformed one).
local function flight_key(id)
  local bar = string.find(id, '|', 1, true)
  if not bar then
    return nil
  end
  return string.sub(id, bar + 1)
end

-- Returns token, attempts, score, key; nil for a malformed id.
local function flight_parse(id)
  local t, a, s, p = string.match(id, '^(%d+),(%d+),([^|,]+)|()')
  if not t then
    return nil
  end
  return t, tonumber(a), tonumber(s), string.sub(id, p)
end

local function parked_make(score, payload)
  return fmt(score) .. '|' .. payload
end

-- Returns score, payload.
local function parked_parse(v)
  local s, p = string.match(v, '^(%-?%d+)|()')
  return tonumber(s), string.sub(v, p)
end

-- Calls a variadic command in chunks (Lua's unpack has a stack limit).
local function bulk(cmd, key, args, step)
  local n = #args
  local per = 4000 - (4000 % step)
  for i = 1, n, per do
    local j = math.min(i + per - 1, n)
    redis.call(cmd, key, unpack(args, i, j))
  end
end

local function dead_make(attempts, score, dead_ms, deaths, err, payload)
  return attempts .. ',' .. fmt(score) .. ',' .. fmt(dead_ms) .. ',' .. deaths .. ',' .. #err .. '|' .. err .. payload
end

-- Returns attempts, score, dead_ms, deaths, error, payload.
local function dead_parse(v)
  local a, s, dm, c, el, p = string.match(v, '^(%d+),(%-?%d+),(%d+),(%d+),(%d+)|()')
  el = tonumber(el)
  return tonumber(a), tonumber(s), tonumber(dm), tonumber(c), string.sub(v, p, p + el - 1), string.sub(v, p + el)
end

-- The first message in consumption order: member and score, or nil.
local function head(kind)
  local r
  if kind == 'p' then
    r = redis.call('ZRANGE', K.q, 0, 0, 'REV', 'WITHSCORES')
  else
    r = redis.call('ZRANGE', K.q, 0, 0, 'WITHSCORES')
  end
  if r[1] then
    return r[1], tonumber(r[2])
  end
  return nil, nil
end

local function first_score(key)
  local r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if r[1] then
    return tonumber(r[2])
  end
  return false
end

-- Counters are summed in a table and written once per script call.
local function counters()
  return { sent = 0, merged = 0, delivered = 0, acked = 0, retried = 0, dead = 0, dropped = 0 }
end

local function flush_counters(c)
  for name, v in pairs(c) do
    if v ~= 0 and name ~= 'retry_at' then
      redis.call('HINCRBY', K.m, name, fmt(v))
    end
  end
end

-- Priority score: higher priority first, then lower sequence (FIFO).
local function priority_score(priority, seq)
  return priority * TWO32 + (TWO32 - 1 - (seq % TWO32))
end

local function priority_reorder(score, priority)
  return priority * TWO32 + (score % TWO32)
end

-- Moves a duplicate that waited behind an in-flight delivery into the
-- pending set. The caller has already removed the in-flight entry.
local function release_parked(key, parked)
  local s, p = parked_parse(parked)
  redis.call('HDEL', K.n, key)
  redis.call('HDEL', K.a, key)
  redis.call('HSET', K.d, key, p)
  redis.call('ZADD', K.q, fmt(s), key)
end

-- Moves an in-flight message to the dead letters (merging with an older
-- dead letter of the same key, whose death count it keeps).
local function to_dead(key, a, s, payload, err, now, dead_max, c)
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
-- wins). Returns 'dead', 'superseded' or 'retry'.
local function fail(kind, id, err, delay, now, cfg, c, jitter)
  local _, a, s, key = flight_parse(id)
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
    to_dead(key, a, s, p, err, now, cfg.dead_max, c)
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
  if delay < 0 then
    delay = backoff(a, cfg.backoff_ms, cfg.backoff_max_ms, jitter)
  end
  if kind == 'p' then
    redis.call('HSET', K.a, key, meta_make(a, s))
    if delay > 0 then
      redis.call('ZADD', K.r, fmt(now + delay), key)
      c.retry_at = math.min(c.retry_at or (now + delay), now + delay)
    else
      redis.call('ZADD', K.q, fmt(s), key)
    end
  else
    local ns = now + delay
    redis.call('HSET', K.a, key, meta_make(a, ns))
    redis.call('ZADD', K.q, fmt(ns), key)
  end
  return 'retry'
end

-- Publishes "<slot>,<score>" when the head of the pending set changed, and
-- "<slot>,<ms>,t" when a priority retry was scheduled (wake up then).
-- A channel with a hash tag ('{') is a cluster's sharded channel of this
-- slot's tag (SPUBLISH stays on the slot's shard); one without is a single
-- node's topic channel (PUBLISH). Names cannot hold '{' otherwise.
local function announce(kind, channel, slot, before_member, before_score, c)
  local m, s = head(kind)
  local cmd = 'PUBLISH'
  if string.find(channel, '{', 1, true) then
    cmd = 'SPUBLISH'
  end
  if m and (m ~= before_member or s ~= before_score) then
    redis.call(cmd, channel, slot .. ',' .. fmt(s))
  end
  if c and c.retry_at then
    redis.call(cmd, channel, slot .. ',' .. fmt(c.retry_at) .. ',t')
  end
end

-- Serial mode: is the slot leased to `owner` with `epoch`, right now?
-- Also returns whether any live lease is held (parallel consumers skip such slots).
-- Returns: whether the caller may go on (a serial caller must hold the live
-- lease at its epoch; a parallel caller always may), whether a serial owner
-- holds the slot now, and until when (ms).
local function lease_check(owner, epoch, now)
  local l = redis.call('HMGET', K.l, 'owner', 'epoch', 'until')
  local till = tonumber(l[3] or '0') or 0
  local live = l[1] ~= false and l[1] ~= '' and till > now
  if owner == '' then
    return true, live, till
  end
  return live and l[1] == owner and l[2] == epoch, live, till
end

local function fenced_reply(slot, epoch)
  return redis.error_reply('RMQ_FENCED slot ' .. slot .. ' is no longer leased to this consumer at epoch ' .. epoch)
end
