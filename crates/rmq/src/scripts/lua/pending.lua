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
