-- pop.lua: takes due messages of one slot into flight (phase one of two).
-- Includes: layout records notify lifecycle fence
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind: 'p' | 'f' | 'r'
-- ARGV[2] count: how many messages to take at most (0 only reclaims and reports)
-- ARGV[3] lease_ms: how long a delivery lasts
-- ARGV[4] max_attempts
-- ARGV[5] backoff_ms: first retry delay     ARGV[6] backoff_max_ms     ARGV[7] jitter: in [0,1)
-- ARGV[8] channel: for wake-up notices      ARGV[9] slot: its number   ARGV[10] dead_max: dead letters kept per slot (0 = all)
-- ARGV[11] owner: serial mode's lease owner ('' in parallel mode)   ARGV[12] epoch: its fencing token
-- ARGV[13] dead_ttl_ms: dead letters older than this are dropped, 100 per call at most (0 = kept)
-- Serial mode takes one message, and only when nothing of the slot is in
-- flight; a caller whose lease is not current is refused (RMQ_FENCED,
-- nothing written). Parallel mode takes nothing from a slot a serial owner holds.
-- Nothing is taken from a paused slot (pause.lua); it reports no head and no retry.
-- Before taking, it rolls back expired leases (as failed attempts) and moves
-- priority retries whose backoff is over back to the pending set.
-- Returns: { now, head score or false, next retry ms or false, next lease deadline or false,
--            ended, then per message: delivery id, payload }
--   ended: expired leases rolled back here that ended their message (dead, superseded
--   or cancelled) rather than retrying it
--   head is false when the caller may not take now: in serial mode while something of
--   the slot is in flight; when a parallel caller asks to take (count > 0) while a
--   serial owner leases the slot, and then "next retry" is false and "next lease
--   deadline" is the earlier of the slot lease's end and the first in-flight deadline,
--   so the caller sleeps until then (or a notice) instead of asking again at once.
--   A look (count 0) reports the slot as it is (but for a paused slot: no head, no
--   retry): serial consumers look at their own leased slots that way.
-- A delivery id is "<token>,<attempt>,<score>[,<origin>]|<key>" (see records.lua); settle
-- takes it back to name the delivery.
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

local kind = ARGV[1]
-- At most 1000 per call: Lua's unpack is limited (about 8000 values).
local wanted = math.min(tonumber(ARGV[2]) or 0, 1000)
local count = wanted
local lease = tonumber(ARGV[3])
local cfg = {
  max_attempts = tonumber(ARGV[4]),
  backoff_ms = tonumber(ARGV[5]),
  backoff_max_ms = tonumber(ARGV[6]),
  dead_max = tonumber(ARGV[10]),
  dead_ttl = tonumber(ARGV[13]) or 0,
}
local jitter = tonumber(ARGV[7])
local channel = ARGV[8]
local slot = ARGV[9]
local now = now_ms()

local owner, epoch = ARGV[11] or '', ARGV[12] or ''
local fence_ok, leased, leased_until, paused = lease_check(owner, epoch, now)
if not fence_ok then
  return fenced_reply(slot, epoch)
end
local blocked = false
if (owner == '' and leased) or paused then
  count = 0
  blocked = true
end

local c = counters()
local hm, hs = head(kind)

-- 1. Roll back expired leases, oldest first.
local expired = redis.call('ZRANGEBYSCORE', K.f, '-inf', now, 'LIMIT', 0, 100)
local ready = {}
if kind == 'p' then
  ready = redis.call('ZRANGEBYSCORE', K.r, '-inf', now, 'LIMIT', 0, 1000)
end
local has_meta = redis.call('HLEN', K.a) > 0
-- l, q, f, r and a were read above and nothing is written before this
-- check: taking writes q, f, a, m and reads d; rolling back and retrying
-- touch every key.
local bad = check_all_or(#expired > 0 or #ready > 0, 'd', 'm')
if not bad and cfg.dead_ttl > 0 then
  bad = check_keys('x', 'X')
end
if bad then
  return bad
end
trim_dead(cfg.dead_ttl, now, c)
-- Leases that ran out and ended their message (dead, superseded or
-- cancelled): the caller gives a bounded topic's room back for them.
local ended = 0
for i, id in ipairs(expired) do
  if fail(kind, id, 'lease expired', -1, now, cfg, c, (jitter + i * 0.6180339887) % 1) ~= 'retry' then
    ended = ended + 1
  end
end

if owner ~= '' then
  if redis.call('ZCARD', K.f) > 0 then
    count = 0
    blocked = true
  else
    count = math.min(count, 1)
  end
end

-- 2. Priority retries whose backoff is over go back with their old score.
if kind == 'p' then
  if #ready > 0 then
    local metas = redis.call('HMGET', K.a, unpack(ready))
    local zargs = {}
    for i, key in ipairs(ready) do
      if metas[i] then
        local _, s = meta_parse(metas[i])
        zargs[#zargs + 1] = fmt(s)
        zargs[#zargs + 1] = key
      end
    end
    redis.call('ZREM', K.r, unpack(ready))
    if #zargs > 0 then
      redis.call('ZADD', K.q, unpack(zargs))
    end
  end
end

if #expired > 0 or #ready > 0 then
  has_meta = redis.call('HLEN', K.a) > 0 -- rolled-back messages wrote theirs
end

-- 3. Take up to count due messages.
local keys, scores = {}, {}
if count > 0 then
  local taken
  if kind == 'p' then
    taken = redis.call('ZPOPMAX', K.q, count)
  else
    taken = redis.call('ZRANGEBYSCORE', K.q, '-inf', now, 'WITHSCORES', 'LIMIT', 0, count)
  end
  for i = 1, #taken, 2 do
    keys[#keys + 1] = taken[i]
    scores[#scores + 1] = taken[i + 1]
  end
  if kind ~= 'p' and #keys > 0 then
    redis.call('ZREM', K.q, unpack(keys))
  end
end

local out = {}
local got = #keys
if got > 0 then
  local payloads = redis.call('HMGET', K.d, unpack(keys))
  -- Attempts of redelivered messages; their meta moves into the delivery id.
  local metas = {}
  if has_meta then
    metas = redis.call('HMGET', K.a, unpack(keys))
    local had = {}
    for i, key in ipairs(keys) do
      if metas[i] then
        had[#had + 1] = key
      end
    end
    if #had > 0 then
      redis.call('HDEL', K.a, unpack(had))
    end
  end
  local tok = redis.call('HINCRBY', K.m, 'tok', fmt(got)) - got
  if tok == 0 then
    -- The slot's first delivery since its topic was defined: its tokens
    -- start from the server clock (ms x 1000), so that they do not repeat
    -- when a topic is deleted and defined again, nor between deployments,
    -- and a message's stable id (see flight_make) stays its own.
    tok = now * 1000
    redis.call('HSET', K.m, 'tok', fmt(tok + got))
  end
  local deadline = fmt(now + lease)
  local fargs = {}
  for i, key in ipairs(keys) do
    local p = payloads[i]
    if p then
      tok = tok + 1
      local a, origin = 1, nil
      if metas[i] then
        a = meta_parse(metas[i]) + 1
        origin = meta_origin(metas[i])
      end
      local id = flight_make(tok, a, scores[i], key, origin)
      fargs[#fargs + 1] = deadline
      fargs[#fargs + 1] = id
      out[#out + 1] = id
      out[#out + 1] = p
    end
  end
  if #fargs > 0 then
    redis.call('ZADD', K.f, unpack(fargs))
    c.delivered = c.delivered + #fargs / 2
  end
end

flush_counters(c)
if #expired > 0 then
  announce(kind, channel, slot, hm, hs, c)
end

local _, qs = head(kind)
local retry_at, flight_at = first_score(K.r), first_score(K.f)
index_put(slot, index_of(kind, qs, retry_at, flight_at, paused))
-- A parallel take that leaves work behind marks it (notify.lua): more due
-- now wakes a second consumer to help, and work due later is left to
-- whoever takes the mark (the popper does not keep it); a serial owner's
-- slot is marked at the end of its lease, when it may be taken. Not a
-- look, nor a paused slot (its resume marks it).
if owner == '' and wanted > 0 and not paused then
  local v = index_of(kind, qs, retry_at, false, false)
  if v and leased then
    v = leased_until
  end
  mark_exact(slot, v)
end
if paused then
  -- Nothing to take until a resume, which sends a notice; expired leases
  -- are still rolled back (the first in-flight deadline is reported).
  qs, retry_at = nil, false
elseif owner == '' and leased and wanted > 0 then
  -- A serial owner's slot: nothing to take here before its lease ends.
  qs, retry_at = nil, false
  if not flight_at or leased_until < flight_at then
    flight_at = leased_until
  end
elseif blocked and redis.call('ZCARD', K.f) > 0 then
  -- Nothing to take until the in-flight delivery ends (its lease deadline is reported).
  qs = nil
end
local res = { now, qs or false, retry_at, flight_at, ended }
for i = 1, #out do
  res[#res + 1] = out[i]
end
return res
