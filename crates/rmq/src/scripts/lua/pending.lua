-- pending.lua: a slot's pending messages, in one sorted set while few and
-- in small key-hashed ones when many, so that each costs Redis the least
-- memory (issue 21 item 5) and a small slot costs no more work than before.
--
-- One sorted set of pending messages costs ~280 bytes a message once it
-- outgrows Redis' compact (listpack) encoding at 128 members: a skiplist
-- node and a dict entry each. So a slot has two shapes:
-- * flat (m has no qb): q is the pending set itself, member = merge key,
--   score = order; it stays a listpack up to PENDING_FLAT_MAX members.
-- * bucketed (m has qb = n >= 2, qn = the count), once a flat set of a
--   compact topic outgrew PENDING_FLAT_MAX; until it shrinks to
--   PENDING_FLAT_MIN:
--     <q>:<b>  ZSET  bucket b (0 <= b < n) by a hash of the merge key:
--                    member = merge key, score = order; ~LOAD members, so
--                    it stays a listpack (~30 bytes a member)
--     q        ZSET  the index: each non-empty bucket's head (its first
--                    member in consumption order) with its score. Its own
--                    first member is the slot's next message in both
--                    shapes, so every reader of the head (notify.lua's head,
--                    firsts.lua) reads q as it always did.
--     <q>:h    HASH  bucket -> "<score>|<key>" of its head: a write learns
--                    the heads of the buckets it touches in one read.
-- Buckets are addressed by linear hashing: with n buckets and p the largest
-- power of two <= n, a key of hash h is in bucket h mod 2p, or h mod p when
-- that is >= n. The set grows one bucket at a time (splitting bucket
-- n - p, which moves about half of it) when it holds more than LOAD
-- messages a bucket on average, and shrinks the same way (merging the last
-- bucket into its buddy) below LOAD / 4. Every key stays where its hash
-- says, so a lookup by key reads one small set.
--
-- Only a topic whose layout is compact (the kind passed in upper case: see
-- pending_use) turns a flat set into buckets; a flat topic keeps each slot
-- one sorted set however deep (~280 B a message against ~190 B, but a take
-- touches one key instead of about one bucket a message). Both shapes are
-- read and written whatever the topic's layout, so a change of layout
-- applies slot by slot: a flat set of a compact topic turns into buckets at
-- its next write while it holds at most PENDING_CONVERT_MAX (a deeper one
-- when it shrinks to that), and buckets turn flat when they shrink to
-- PENDING_FLAT_MIN.
--
-- Consumption order is the order of one sorted set: score, then member
-- bytes on equal scores (ascending; priority topics: both descending, as
-- ZPOPMAX). Pop merges the buckets through the index (see pending_take).
-- A slot written by a version before buckets is a flat one.
--
-- The bucket keys and <q>:h are not in the scripts' KEYS (their number
-- changes): Redis accepts undeclared keys of the declared keys' hash slot.
-- On a cluster, a script must not run while its hash slot moves key by key
-- (a bucket may already be gone): every writing call there names a fresh
-- request key (memo.lua), which a half-moved slot never holds, so Redis
-- answers TRYAGAIN or ASK before the script runs.

local PENDING_LOAD = 48
local PENDING_FLAT_MAX = 120
local PENDING_FLAT_MIN = 40
local PENDING_SPLITS_PER_CALL = 64
local PENDING_MERGES_PER_CALL = 64
-- The most members a flat set may hold to be turned into buckets in one
-- call (a few ms of Redis at most).
local PENDING_CONVERT_MAX = 2000

-- Consumption order: true on priority topics (highest first). Set once per
-- call by pending_use before any other helper here.
local PENDING_REV = nil
-- Whether a flat set that outgrows PENDING_FLAT_MAX turns into buckets.
local PENDING_COMPACT = false

-- Takes the topic's kind as a script received it ('p', 'f' or 'r'; in
-- upper case when the topic's layout is compact) and returns it in lower
-- case, the form every other helper takes. An unknown kind is an error
-- (every script calls this before its first write).
local function pending_use(kind_arg)
  local kind = string.lower(kind_arg or '')
  if kind ~= 'p' and kind ~= 'f' and kind ~= 'r' then
    error('rmq: unknown topic kind ' .. tostring(kind_arg))
  end
  PENDING_REV = kind == 'p'
  PENDING_COMPACT = kind ~= kind_arg
  return kind
end

-- Whether merge key a sorts before b as Redis orders members (bytes, not
-- the locale's collation that Lua's '<' uses).
local function member_before(a, b)
  if a == b then
    return false
  end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- Whether (s1, k1) comes before (s2, k2) in consumption order (scores as numbers).
local function comes_before(s1, k1, s2, k2)
  if s1 ~= s2 then
    if PENDING_REV then
      return s1 > s2
    end
    return s1 < s2
  end
  if PENDING_REV then
    return member_before(k2, k1)
  end
  return member_before(k1, k2)
end

local function pow2_floor(n)
  local p = 1
  while p * 2 <= n do
    p = p * 2
  end
  return p
end

-- A key's hash, computed once per key per call.
local KEY_HASH = {}
local function key_hash(key)
  local h = KEY_HASH[key]
  if not h then
    h = tonumber(string.sub(redis.sha1hex(key), 1, 8), 16)
    KEY_HASH[key] = h
  end
  return h
end

local function bucket_of(h, n)
  if n <= 1 then
    return 0
  end
  local p = pow2_floor(n)
  local b = h % (2 * p)
  if b >= n then
    b = b - p
  end
  return b
end

-- The shape of the slot K points at, read once per slot per call.
local PENDING = {}

local function pending_state()
  assert(PENDING_REV ~= nil, 'pending_use before the pending set')
  local st = PENDING[K.m]
  if not st then
    local v = redis.call('HMGET', K.m, 'qb', 'qn')
    checked('m') -- a typed read
    local n = tonumber(v[1])
    st = { flat = not n, n = n or 0, c = tonumber(v[2]) or 0 }
    PENDING[K.m] = st
  end
  return st
end

local function bucket_key(b)
  return K.q .. ':' .. b
end

local function bucket_for(st, key)
  return bucket_of(key_hash(key), st.n)
end

-- A bucket's head: key, score (number), or nil.
local function bucket_head(bk)
  local r
  if PENDING_REV then
    r = redis.call('ZRANGE', bk, '0', '0', 'REV', 'WITHSCORES')
  else
    r = redis.call('ZRANGE', bk, '0', '0', 'WITHSCORES')
  end
  if r[1] then
    return r[1], tonumber(r[2])
  end
  return nil, nil
end

-- <q>:h: the heads of the buckets.
local function heads_key()
  return K.q .. ':h'
end

-- The heads of buckets bs: { [b] = { k = key, s = score } or false }.
local function heads_read(bs)
  local out = {}
  local v = redis.call('HMGET', heads_key(), unpack(bs))
  for i, b in ipairs(bs) do
    local x = v[i]
    if x then
      local bar = string.find(x, '|', 1, true)
      out[b] = { k = string.sub(x, bar + 1), s = tonumber(string.sub(x, 1, bar - 1)) }
    else
      out[b] = false
    end
  end
  return out
end

-- Writes new heads: { [b] = { k, s } or false (empty) }, in bucket order bs.
local function heads_write(bs, heads)
  local set, gone = {}, {}
  for _, b in ipairs(bs) do
    local h = heads[b]
    if h then
      set[#set + 1] = b
      set[#set + 1] = fmt(h.s) .. '|' .. h.k
    elseif h == false then
      gone[#gone + 1] = b
    end
  end
  if #set > 0 then
    bulk('HSET', heads_key(), set, 2)
  end
  if #gone > 0 then
    bulk('HDEL', heads_key(), gone, 1)
  end
end

-- Replaces a bucket's entry in the index: old head key (or nil) by the new
-- head (or nil), into the lists of removals and additions of one call.
local function index_change(changes, old_key, new_key, new_score)
  if old_key and old_key ~= new_key then
    changes.rem[#changes.rem + 1] = old_key
  end
  if new_key then
    changes.add[#changes.add + 1] = fmt(new_score)
    changes.add[#changes.add + 1] = new_key
  end
end

local function index_apply(changes)
  if #changes.rem > 0 then
    bulk('ZREM', K.q, changes.rem, 1)
  end
  if #changes.add > 0 then
    bulk('ZADD', K.q, changes.add, 2)
  end
end

-- The bucket heads one step changed: each replaces its bucket's entry in
-- the index and in <q>:h, all written at once by heads_apply.
local function heads_moves()
  return { rem = {}, add = {}, bs = {}, heads = {} }
end

local function head_moved(mv, b, old_key, new_key, new_score)
  index_change(mv, old_key, new_key, new_score)
  mv.bs[#mv.bs + 1] = b
  mv.heads[b] = new_key and { k = new_key, s = new_score } or false
end

local function heads_apply(mv)
  index_apply(mv)
  heads_write(mv.bs, mv.heads)
end

-- Reads a whole bucket: keys and scores (numbers).
local function bucket_all(bk)
  local r = redis.call('ZRANGE', bk, '0', '-1', 'WITHSCORES')
  local keys, scores = {}, {}
  for i = 1, #r, 2 do
    keys[#keys + 1] = r[i]
    scores[#scores + 1] = tonumber(r[i + 1])
  end
  return keys, scores
end

-- The first of keys/scores in consumption order: key, score, or nil.
local function best_of(keys, scores)
  local bk, bs
  for i, k in ipairs(keys) do
    if not bk or comes_before(scores[i], k, bs, bk) then
      bk, bs = k, scores[i]
    end
  end
  return bk, bs
end

local function zadd_args(keys, scores)
  local args = {}
  for i, k in ipairs(keys) do
    args[#args + 1] = fmt(scores[i])
    args[#args + 1] = k
  end
  return args
end

-- Adds bucket n (its buddy n - p gives it the keys that now hash to it).
local function pending_split(st)
  local new = st.n
  local buddy = new - pow2_floor(new)
  st.n = new + 1
  local bk, nk = bucket_key(buddy), bucket_key(new)
  local keys, scores = bucket_all(bk)
  local old_head = best_of(keys, scores)
  local stay_k, stay_s, move_k, move_s = {}, {}, {}, {}
  for i, k in ipairs(keys) do
    if bucket_of(key_hash(k), st.n) == new then
      move_k[#move_k + 1], move_s[#move_s + 1] = k, scores[i]
    else
      stay_k[#stay_k + 1], stay_s[#stay_s + 1] = k, scores[i]
    end
  end
  if #move_k == 0 then
    return
  end
  if #keys > 128 then
    -- Rewritten whole: a set that outgrew the listpack keeps its big
    -- encoding until it is deleted.
    redis.call('UNLINK', bk)
    if #stay_k > 0 then
      bulk('ZADD', bk, zadd_args(stay_k, stay_s), 2)
    end
  else
    bulk('ZREM', bk, move_k, 1)
  end
  bulk('ZADD', nk, zadd_args(move_k, move_s), 2)
  local mv = heads_moves()
  local sk, ss = best_of(stay_k, stay_s)
  head_moved(mv, buddy, old_head, sk, ss)
  local mk, ms = best_of(move_k, move_s)
  head_moved(mv, new, nil, mk, ms)
  heads_apply(mv)
end

-- Removes the last bucket, its keys moving into its buddy.
local function pending_merge(st)
  local last = st.n - 1
  local buddy = last - pow2_floor(last)
  local lk, bk = bucket_key(last), bucket_key(buddy)
  st.n = last
  local keys, scores = bucket_all(lk)
  if #keys == 0 then
    return
  end
  local last_head, last_score = best_of(keys, scores)
  local buddy_head, buddy_score = bucket_head(bk)
  bulk('ZADD', bk, zadd_args(keys, scores), 2)
  redis.call('UNLINK', lk)
  local head_k, head_s = last_head, last_score
  if buddy_head and comes_before(buddy_score, buddy_head, last_score, last_head) then
    redis.call('ZREM', K.q, last_head)
    head_k, head_s = buddy_head, buddy_score
  elseif buddy_head then
    redis.call('ZREM', K.q, buddy_head)
  end
  redis.call('HDEL', heads_key(), last)
  heads_write({ buddy }, { [buddy] = { k = head_k, s = head_s } })
end

-- A flat set grown past PENDING_FLAT_MAX becomes buckets.
local function pending_to_buckets(st)
  local all = redis.call('ZRANGE', K.q, '0', '-1', 'WITHSCORES')
  local c = #all / 2
  st.flat, st.n, st.c = false, math.max(2, math.ceil(c / PENDING_LOAD)), c
  local groups, order = {}, {}
  for i = 1, #all, 2 do
    local k = all[i]
    local b = bucket_for(st, k)
    local g = groups[b]
    if not g then
      g = { keys = {}, scores = {} }
      groups[b] = g
      order[#order + 1] = b
    end
    g.keys[#g.keys + 1] = k
    g.scores[#g.scores + 1] = tonumber(all[i + 1])
  end
  redis.call('UNLINK', K.q)
  local heads, index = {}, {}
  for _, b in ipairs(order) do
    local g = groups[b]
    bulk('ZADD', bucket_key(b), zadd_args(g.keys, g.scores), 2)
    local hk, hs = best_of(g.keys, g.scores)
    heads[b] = { k = hk, s = hs }
    index[#index + 1] = fmt(hs)
    index[#index + 1] = hk
  end
  bulk('ZADD', K.q, index, 2)
  heads_write(order, heads)
end

-- A bucketed set shrunk to PENDING_FLAT_MIN becomes flat again.
local function pending_to_flat(st)
  local args, gone = {}, {}
  for b = 0, st.n - 1 do
    local bk = bucket_key(b)
    local r = redis.call('ZRANGE', bk, '0', '-1', 'WITHSCORES')
    for i = 1, #r, 2 do
      args[#args + 1] = r[i + 1]
      args[#args + 1] = r[i]
    end
    gone[#gone + 1] = bk
  end
  gone[#gone + 1] = heads_key()
  bulk('UNLINK', K.q, gone, 1)
  if #args > 0 then
    bulk('ZADD', K.q, args, 2)
  end
  redis.call('HDEL', K.m, 'qb', 'qn')
  st.flat, st.n, st.c = true, 0, #args / 2
end

-- After a bucketed set changed: it grows or shrinks by buckets, or turns
-- flat, and its count and size are written.
local function pending_settle(st)
  if st.c <= PENDING_FLAT_MIN then
    pending_to_flat(st)
    return
  end
  local splits, merges = 0, 0
  while st.c > st.n * PENDING_LOAD and splits < PENDING_SPLITS_PER_CALL do
    pending_split(st)
    splits = splits + 1
  end
  while st.n > 2 and st.c * 4 < st.n * PENDING_LOAD and merges < PENDING_MERGES_PER_CALL do
    pending_merge(st)
    merges = merges + 1
  end
  redis.call('HSET', K.m, 'qb', fmt(st.n), 'qn', fmt(st.c))
end

-- Groups keys (and values alongside) by bucket: { [b] = { keys, values } }
-- and the buckets in first-seen order.
local function by_bucket(st, keys, values)
  local groups, order = {}, {}
  for i, k in ipairs(keys) do
    local b = bucket_for(st, k)
    local g = groups[b]
    if not g then
      g = { keys = {}, values = {}, at = {} }
      groups[b] = g
      order[#order + 1] = b
    end
    g.keys[#g.keys + 1] = k
    g.at[#g.at + 1] = i
    if values then
      g.values[#g.values + 1] = values[i]
    end
  end
  return groups, order
end

-- The scores of keys (strings, false where not pending), as ZMSCORE.
local function pending_scores(keys)
  local out = {}
  if #keys == 0 then
    return out
  end
  local st = pending_state()
  if st.flat then
    return redis.call('ZMSCORE', K.q, unpack(keys))
  end
  for i = 1, #keys do
    out[i] = false
  end
  local groups, order = by_bucket(st, keys)
  for _, b in ipairs(order) do
    local g = groups[b]
    local r = redis.call('ZMSCORE', bucket_key(b), unpack(g.keys))
    for j, i in ipairs(g.at) do
      out[i] = r[j] or false
    end
  end
  return out
end

-- The score of one key (a string), or nil when it is not pending.
local function pending_score(key)
  local st = pending_state()
  local s
  if st.flat then
    s = redis.call('ZSCORE', K.q, key)
  else
    s = redis.call('ZSCORE', bucket_key(bucket_for(st, key)), key)
  end
  return s or nil
end

-- Adds keys with scores (numbers), or moves those already pending to
-- their new scores. Each key at most once per call.
local function pending_put(keys, scores)
  if #keys == 0 then
    return
  end
  -- It writes q: the first member read before may be gone.
  HEADS_READ[K.q] = nil
  local st = pending_state()
  if st.flat then
    bulk('ZADD', K.q, zadd_args(keys, scores), 2)
    if PENDING_COMPACT then
      local card = redis.call('ZCARD', K.q)
      if card > PENDING_FLAT_MAX and card <= PENDING_CONVERT_MAX then
        pending_to_buckets(st)
        pending_settle(st)
      end
    end
    return
  end
  local groups, order = by_bucket(st, keys, scores)
  local heads = heads_read(order)
  local mv = heads_moves()
  for _, b in ipairs(order) do
    local g = groups[b]
    local bk = bucket_key(b)
    local old_key, old_score = nil, nil
    if heads[b] then
      old_key, old_score = heads[b].k, heads[b].s
    end
    st.c = st.c + bulk('ZADD', bk, zadd_args(g.keys, g.values), 2)
    -- The new head: the old one unless a put key comes before it, or the
    -- old head itself moved (then read it again).
    local moved_head = false
    for _, k in ipairs(g.keys) do
      if k == old_key then
        moved_head = true
      end
    end
    local new_key, new_score
    if moved_head then
      new_key, new_score = bucket_head(bk)
    else
      new_key, new_score = old_key, old_score
      for j, k in ipairs(g.keys) do
        if not new_key or comes_before(g.values[j], k, new_score, new_key) then
          new_key, new_score = k, g.values[j]
        end
      end
    end
    if new_key ~= old_key or new_score ~= old_score then
      head_moved(mv, b, old_key, new_key, new_score)
    end
  end
  heads_apply(mv)
  pending_settle(st)
end

-- Removes keys from the pending set; returns how many were pending.
local function pending_remove(keys)
  if #keys == 0 then
    return 0
  end
  -- It writes q: the first member read before may be gone.
  HEADS_READ[K.q] = nil
  local st = pending_state()
  if st.flat then
    return bulk('ZREM', K.q, keys, 1)
  end
  local groups, order = by_bucket(st, keys)
  local heads = heads_read(order)
  local mv = heads_moves()
  local removed = 0
  for _, b in ipairs(order) do
    local g = groups[b]
    local bk = bucket_key(b)
    local old_key = heads[b] and heads[b].k
    removed = removed + bulk('ZREM', bk, g.keys, 1)
    local head_gone = false
    for _, k in ipairs(g.keys) do
      if k == old_key then
        head_gone = true
      end
    end
    if head_gone then
      head_moved(mv, b, old_key, bucket_head(bk))
    end
  end
  heads_apply(mv)
  st.c = math.max(st.c - removed, 0)
  pending_settle(st)
  return removed
end

-- Takes up to count messages off the front of the pending set, in
-- consumption order, stopping at a score above limit (nil: no limit).
-- Returns keys and their scores (strings).
--
-- The first count messages lie in buckets whose heads are among the first
-- count entries of the index, so one read of the index's first count + 1
-- entries finds every bucket this call takes from. The buckets are then
-- merged in memory: a run is taken from the bucket at the front while it
-- comes before the next bucket's head, and that bucket's next member takes
-- its place among the heads. Each bucket touched is read once (its members
-- kept for its next runs) and written once; the index is written once.
local function pending_take(count, limit)
  local keys, scores = {}, {}
  if count <= 0 then
    return keys, scores
  end
  -- It writes q: the first member read before may be gone.
  HEADS_READ[K.q] = nil
  local st = pending_state()
  if st.flat then
    local taken
    if PENDING_REV then
      taken = redis.call('ZPOPMAX', K.q, fmt(count))
    else
      taken = redis.call('ZRANGE', K.q, '-inf', fmt(limit), 'BYSCORE', 'LIMIT', '0', fmt(count), 'WITHSCORES')
    end
    for i = 1, #taken, 2 do
      keys[#keys + 1] = taken[i]
      scores[#scores + 1] = taken[i + 1]
    end
    if not PENDING_REV and #keys > 0 then
      redis.call('ZREM', K.q, unpack(keys))
    end
    return keys, scores
  end
  local r
  if PENDING_REV then
    r = redis.call('ZRANGE', K.q, '0', fmt(count), 'REV', 'WITHSCORES')
  else
    r = redis.call('ZRANGE', K.q, '0', fmt(count), 'WITHSCORES')
  end
  local heads = {}
  for i = 1, #r, 2 do
    heads[#heads + 1] = { k = r[i], s = tonumber(r[i + 1]) }
  end
  local function place(h)
    local lo, hi = 1, #heads + 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if comes_before(heads[mid].s, heads[mid].k, h.s, h.k) then
        lo = mid + 1
      else
        hi = mid
      end
    end
    table.insert(heads, lo, h)
  end
  local taken, old_head, new_head, touched, bufs = {}, {}, {}, {}, {}
  local share = math.ceil(2 * count / math.max(#heads, 1)) + 2
  while #keys < count and #heads > 0 do
    local h = heads[1]
    if limit and h.s > limit then
      break
    end
    table.remove(heads, 1)
    local b = h.b or bucket_for(st, h.k)
    if not taken[b] then
      taken[b] = {}
      old_head[b] = h.k
      touched[#touched + 1] = b
    end
    -- The bucket's members from its head on, read once and then kept:
    -- a bucket comes to the front again and again as runs interleave.
    local nxt = heads[1]
    local first = true
    new_head[b] = false
    while true do
      local buf = bufs[b]
      if not buf or buf.i > #buf.k then
        if buf and not buf.more then
          break -- the bucket is empty now
        end
        -- About twice a bucket's share of the call, and more if it runs out.
        local per = math.min(count - #keys + 1, share)
        local off = #taken[b]
        local run
        if PENDING_REV then
          run = redis.call('ZRANGE', bucket_key(b), fmt(off), fmt(off + per - 1), 'REV', 'WITHSCORES')
        else
          run = redis.call('ZRANGE', bucket_key(b), fmt(off), fmt(off + per - 1), 'WITHSCORES')
        end
        buf = { k = {}, s = {}, raw = {}, i = 1, more = #run == 2 * per }
        for j = 1, #run, 2 do
          buf.k[#buf.k + 1] = run[j]
          buf.raw[#buf.raw + 1] = run[j + 1]
          buf.s[#buf.s + 1] = tonumber(run[j + 1])
        end
        bufs[b] = buf
        if #buf.k == 0 then
          break
        end
      end
      local k, s = buf.k[buf.i], buf.s[buf.i]
      if #keys >= count or (limit and s > limit) or (not first and nxt and not comes_before(s, k, nxt.s, nxt.k)) then
        new_head[b] = { k = k, s = s, b = b }
        place(new_head[b])
        break
      end
      keys[#keys + 1] = k
      scores[#scores + 1] = buf.raw[buf.i]
      taken[b][#taken[b] + 1] = k
      buf.i = buf.i + 1
      first = false
    end
  end
  if #touched == 0 then
    return keys, scores -- nothing due: nothing written
  end
  local mv = heads_moves()
  for _, b in ipairs(touched) do
    if #taken[b] > 0 then
      bulk('ZREM', bucket_key(b), taken[b], 1)
    end
    local nh = new_head[b]
    head_moved(mv, b, old_head[b], nh and nh.k, nh and nh.s)
  end
  heads_apply(mv)
  st.c = math.max(st.c - #keys, 0)
  pending_settle(st)
  return keys, scores
end

-- Pending messages in consumption order from position from (0-based), at
-- most limit, as ZRANGE ... WITHSCORES answers (key, score, ...). Reads only.
local function pending_range(from, limit)
  local st = pending_state()
  if st.flat then
    if PENDING_REV then
      return redis.call('ZRANGE', K.q, from, from + limit - 1, 'REV', 'WITHSCORES')
    end
    return redis.call('ZRANGE', K.q, from, from + limit - 1, 'WITHSCORES')
  end
  if limit <= 0 then
    return {}
  end
  local m = from + limit
  -- The first m messages lie in the buckets of the first m heads, and none
  -- comes after the m-th head.
  local r
  if PENDING_REV then
    r = redis.call('ZRANGE', K.q, '0', fmt(m - 1), 'REV', 'WITHSCORES')
  else
    r = redis.call('ZRANGE', K.q, '0', fmt(m - 1), 'WITHSCORES')
  end
  -- With fewer heads than m, every member of their buckets may count.
  local bound = r[#r]
  if #r < 2 * m then
    bound = PENDING_REV and '-inf' or '+inf'
  end
  local all = {}
  for i = 1, #r, 2 do
    local bk = bucket_key(bucket_for(st, r[i]))
    local got
    if PENDING_REV then
      got = redis.call('ZRANGE', bk, '+inf', bound, 'BYSCORE', 'REV', 'LIMIT', '0', fmt(m), 'WITHSCORES')
    else
      got = redis.call('ZRANGE', bk, '-inf', bound, 'BYSCORE', 'LIMIT', '0', fmt(m), 'WITHSCORES')
    end
    for j = 1, #got, 2 do
      all[#all + 1] = { k = got[j], s = tonumber(got[j + 1]), raw = got[j + 1] }
    end
  end
  table.sort(all, function(a, b)
    return comes_before(a.s, a.k, b.s, b.k)
  end)
  local out = {}
  for i = from + 1, math.min(m, #all) do
    out[#out + 1] = all[i].k
    out[#out + 1] = all[i].raw
  end
  return out
end

-- How many messages are pending. Reads only.
local function pending_count()
  local st = pending_state()
  if st.flat then
    return redis.call('ZCARD', K.q)
  end
  return st.c
end

-- How many pending messages have a score <= now (due). Reads only.
local function pending_due(now)
  local st = pending_state()
  if st.flat then
    return redis.call('ZCOUNT', K.q, '-inf', now)
  end
  local due = 0
  for _, k in ipairs(redis.call('ZRANGE', K.q, '-inf', now, 'BYSCORE')) do
    due = due + redis.call('ZCOUNT', bucket_key(bucket_for(st, k)), '-inf', now)
  end
  return due
end

-- Every key the pending set uses besides q (for deleting a slot).
local function pending_bucket_keys()
  local st = pending_state()
  local out = {}
  if not st.flat then
    for b = 0, st.n - 1 do
      out[#out + 1] = bucket_key(b)
    end
    out[#out + 1] = heads_key()
  end
  return out
end
