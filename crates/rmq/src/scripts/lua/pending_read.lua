-- pending_read.lua: reads only: pending messages by position (peek), how
-- many are pending and due, and every key a slot's pending set uses (for
-- deleting a slot). An include after pending.lua and pending_heads.lua.

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
