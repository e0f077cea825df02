-- pending_take.lua: the take: up to count messages off the front of the
-- pending set in consumption order, a flat set by one command, a bucketed
-- one by merging its buckets through the index in memory. An include after
-- pending_write.lua.

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
