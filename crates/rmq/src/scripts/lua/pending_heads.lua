-- pending_heads.lua: the index of a bucketed slot's bucket heads (q holds
-- each non-empty bucket's first member, <q>:h each bucket's head as
-- "<score>|<key>"), read and rewritten once per call, and the reads of a
-- whole bucket that keep it. An include after pending.lua (see its header
-- for the two shapes of a slot).

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
