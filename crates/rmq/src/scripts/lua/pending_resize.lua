-- pending_resize.lua: a bucketed slot grows and shrinks one bucket at a
-- time (linear hashing: split bucket n - p, merge the last bucket into its
-- buddy), and a slot turns from flat to buckets and back (pending.lua's
-- header says when). Called after a write changed the count (pending_settle).
-- An include after pending_heads.lua.

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
