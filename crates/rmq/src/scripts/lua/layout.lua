-- layout.lua: the ten keys of a slot, key-type checks, numbers and time.
-- An include: scripts name it on their '-- Includes:' line and the build
-- puts it before their body (Lua has no includes), so its helpers are local
-- to each script and nothing is global.
--
-- Every slot script receives the same ten keys, all under one hash tag:
--   KEYS[1] q  ZSET  pending messages: member = merge key, score = order; on a
--                    slot of more than 120, the index of the buckets <q>:<b>
--                    that hold them (pending.lua). Its first member is the
--                    slot's next message either way.
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
-- A key is in flight when d holds it and neither the pending set nor r does.
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

-- Points K at the i-th slot's keys (from 1) of a reading script that
-- covers many slots of one node: ten keys per slot, slot after slot.
local function use_slot(i)
  local b = (i - 1) * 10
  K.q, K.d, K.f, K.n, K.m = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5]
  K.r, K.x, K.X, K.a, K.l = KEYS[b + 6], KEYS[b + 7], KEYS[b + 8], KEYS[b + 9], KEYS[b + 10]
end

-- How many slots a reading script's KEYS hold (nil unless whole slots).
local function slots_in_keys()
  if #KEYS == 0 or #KEYS % 10 ~= 0 then
    return nil
  end
  return #KEYS / 10
end

-- A whole number as decimal digits. '%d' formats integers directly, which
-- costs a fraction of Lua's float formatting ('%.14g' or '%.0f').
local function fmt(n)
  if n > -2 ^ 62 and n < 2 ^ 62 and n == math.floor(n) then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

-- The server clock (ms), read once per call: every step of a call that
-- does several (settle_take: a settle, then a take) sees one time, and the
-- later ones cost no TIME.
local NOW_MS
local function now_ms()
  if not NOW_MS then
    local t = redis.call('TIME')
    NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return NOW_MS
end

-- The first member of each pending set (or bucket index) this call read,
-- by key (false: the set is empty), and its score (a number). notify.lua's
-- head reads it once; every writer of a pending set (pending.lua's
-- pending_put, pending_remove, pending_take) forgets it. A call that
-- settles and then takes asks for the head up to four times and reads it
-- once. (Two flat tables: no table made per read.)
local HEADS_READ, HEAD_SCORES = {}, {}

local TYPE_OF = { q = 'zset', d = 'hash', f = 'zset', n = 'hash', m = 'hash', r = 'zset', x = 'zset', X = 'hash', a = 'hash', l = 'hash' }

-- Keys this call found of the right type (or absent): a script writes
-- only rmq's own types, so a key passes a second check without a TYPE.
local CHECKED = {}

-- Refuses to run (before any write) when one of the named queue keys
-- ('d', 'm', ...) holds a foreign type.
local function check_keys(...)
  for _, name in ipairs({ ... }) do
    local key, expected = K[name], TYPE_OF[name]
    if not CHECKED[key] then
      local t = redis.call('TYPE', key)['ok']
      if t ~= 'none' and t ~= expected then
        return redis.error_reply('RMQ_WRONGTYPE ' .. key .. ' holds a ' .. t .. ', expected a ' .. expected)
      end
      CHECKED[key] = true
    end
  end
  return nil
end

-- Notes the named keys as checked: a typed read of each just succeeded
-- (a read of a foreign type raises WRONGTYPE before anything is written),
-- so the check before the first write needs no TYPE for them.
local function checked(...)
  for _, name in ipairs({ ... }) do
    CHECKED[K[name]] = true
  end
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

-- Calls a variadic command in chunks (Lua's unpack has a stack limit);
-- returns the sum of its integer replies (members added, fields removed...).
local function bulk(cmd, key, args, step)
  local n = #args
  local per = 4000 - (4000 % step)
  local sum = 0
  for i = 1, n, per do
    local j = math.min(i + per - 1, n)
    local r = redis.call(cmd, key, unpack(args, i, j))
    if type(r) == 'number' then
      sum = sum + r
    end
  end
  return sum
end
