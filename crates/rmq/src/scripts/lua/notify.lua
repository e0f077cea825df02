-- notify.lua: a slot's head (the next message in consumption order) and
-- the wake-up notice published when it changes.

-- The first message in consumption order: member and score, or nil.
local function head(kind)
  local r
  if kind == 'p' then
    r = redis.call('ZRANGE', K.q, 0, 0, 'REV', 'WITHSCORES')
  else
    r = redis.call('ZRANGE', K.q, 0, 0, 'WITHSCORES')
  end
  if r[1] then
    return r[1], tonumber(r[2])
  end
  return nil, nil
end

local function first_score(key)
  local r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if r[1] then
    return tonumber(r[2])
  end
  return false
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
  end
  if c and c.retry_at then
    redis.call(cmd, channel, slot .. ',' .. fmt(c.retry_at) .. ',t')
  end
end
