-- pending_write.lua: the pending set by key, in either shape: the scores
-- of keys (one read per bucket they hash to), adding or moving keys
-- (pending_put) and removing them (pending_remove); each write keeps the
-- bucket heads' index and the count right, then lets the slot resize. An
-- include after pending_resize.lua.

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
