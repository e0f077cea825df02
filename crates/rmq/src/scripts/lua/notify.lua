-- notify.lua: a slot's head (the next message in consumption order), the
-- wake-up notice published when it changes, and the topic's head index.
--
-- The head index (a single node only; see heads.lua) is one ZSET per topic,
-- slot -> when the slot may next have work: for a priority topic, minus the
-- score of its best pending message (<= 0: ready now, best first), else the
-- time (ms) of the earliest of its first due message, its first priority
-- retry and its first lease deadline. A slot with nothing is absent. An
-- entry is never later than the slot's next work: every write that makes
-- work earlier lowers it (announce), pop sets it exactly, and settle
-- removes it once the slot holds nothing.
-- So an idle consumer reads one key instead of looking at every slot.
-- On a Redis Cluster the index is kept per hash tag (keys.rs
-- tag_head_index: the slots of one tag, in that tag's hash slot), and a
-- consumer reads the indexes a master serves in one call (heads.lua).
-- The caller passes the index right after the slot's keys: KEYS[11] on a
-- single node, KEYS[12] on a cluster, whose KEYS[11] is the request key
-- (memo.lua). It is told by its name: only an index holds ':heads#'
-- (neither prefix nor topic may hold a '#'). The index is written last,
-- with pcall: a foreign key there must not fail a script that already
-- wrote (consumers then find the index unreadable and look at every slot
-- instead).
local IDX
local MARKS
for i = 11, 12 do
  if KEYS[i] and string.find(KEYS[i], ':heads#', 1, true) then
    IDX = KEYS[i]
    -- The topic's marks (a single node only, passed right after the
    -- index): see below.
    if KEYS[i + 1] and string.find(KEYS[i + 1], ':marks#', 1, true) then
      MARKS = KEYS[i + 1]
    end
    break
  end
end

-- The topic's marks (a single node only, passed after the index): a ZSET slot -> index value of work that no consumer has been
-- told of yet. An idle consumer waits on it with BZMPOP, and Redis hands
-- each mark to exactly one waiting consumer: a new head wakes one
-- consumer, not every one (the pub/sub notice still goes out, for serial
-- members, which take only the slots they own). A mark is written where a
-- notice is, and by a parallel pop that leaves work behind it (more due
-- now, so that a second consumer helps, or due later, which the popper
-- leaves to whoever takes the mark). A slot has one mark at most: a
-- notice lowers it (ZADD LT), a pop sets it to what it found. In-flight lease deadlines are never marked:
-- a lease ends with its settle, and one that runs out is found by the
-- consumers' rescans of the index. (A serial owner's slot lease is: a
-- parallel pop that may not take from the slot marks its end.) Written with pcall, as the index.

-- Sets slot's entry of the index or of the marks (key; nil when the
-- connection keeps neither) to v, or removes it (v false). With pcall, as
-- every write to them.
local function zset_put(key, slot, v)
  if not key then
    return
  end
  if v then
    redis.pcall('ZADD', key, fmt(v), slot)
  else
    redis.pcall('ZREM', key, slot)
  end
end

-- Marks the slot's work at v (lowers an earlier mark; never raises it).
local function mark_work(slot, v)
  if MARKS then
    redis.pcall('ZADD', MARKS, 'LT', fmt(v), slot)
  end
end

-- Sets the slot's mark to what a pop just found (false: nothing to mark),
-- so that a mark taken later does not tell of a head that pop took (a
-- priority consumer would otherwise serve a worse message first).
local function mark_exact(slot, v)
  zset_put(MARKS, slot, v)
end

-- The first message in consumption order: member and score, or nil. Read
-- once per call until a write of the pending set (HEADS_READ, layout.lua).
local function head(kind)
  local m = HEADS_READ[K.q]
  if m == nil then
    local r
    if kind == 'p' then
      r = redis.call('ZRANGE', K.q, '0', '0', 'REV', 'WITHSCORES')
    else
      r = redis.call('ZRANGE', K.q, '0', '0', 'WITHSCORES')
    end
    m = r[1] or false
    if m then
      HEAD_SCORES[K.q] = tonumber(r[2])
    end
    HEADS_READ[K.q] = m
  end
  if m then
    return m, HEAD_SCORES[K.q]
  end
  return nil, nil
end

local function first_score(key)
  local r = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if r[1] then
    return tonumber(r[2])
  end
  return false
end

-- The index value of pending work whose head has score s.
local function index_value(kind, s)
  if kind == 'p' then
    return -s
  end
  return s
end

-- Lowers the slot's index entry to v (never raises it).
local function index_lower(slot, v)
  if IDX then
    redis.pcall('ZADD', IDX, 'LT', fmt(v), slot)
  end
end

-- The index value of a slot from its pending head score (ignored while
-- paused), first priority retry and first lease deadline (each or false).
local function index_of(kind, head_score, retry_at, flight_at, paused)
  local v = false
  if head_score and not paused then
    v = index_value(kind, head_score)
  end
  for _, t in ipairs({ retry_at, flight_at }) do
    if t and (not v or t < v) then
      v = t
    end
  end
  return v
end

-- Sets the slot's index entry to v (false: the slot has nothing).
local function index_put(slot, v)
  zset_put(IDX, slot, v)
end

-- The first score of a zset the caller may not have read (false when it
-- is empty or holds a foreign type: a script that already wrote must not
-- fail on it).
local function first_score_if_zset(key)
  local r = redis.pcall('ZRANGE', key, '0', '0', 'WITHSCORES')
  if type(r) == 'table' and r[2] then
    return tonumber(r[2])
  end
  return false
end

-- After deliveries ended (settle): the slot's entry goes when the slot
-- holds nothing any more. Anything else left it early, never late (an end
-- only removes work; what settle requeues was announced), and the next pop
-- sets it exactly: a cheap check on the hot path instead of a recount.
-- (f and q were read by the caller: they hold the right types.)
local function index_ended(kind, slot)
  if IDX and redis.call('ZCARD', K.f) == 0 and not head(kind) and not first_score_if_zset(K.r) then
    redis.pcall('ZREM', IDX, slot)
  end
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
    index_lower(slot, index_value(kind, s))
    mark_work(slot, index_value(kind, s))
  end
  if c and c.retry_at then
    redis.call(cmd, channel, slot .. ',' .. fmt(c.retry_at) .. ',t')
    index_lower(slot, c.retry_at)
    mark_work(slot, c.retry_at)
  end
end
