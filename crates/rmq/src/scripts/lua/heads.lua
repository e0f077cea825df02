-- heads.lua: reads or marks a topic's head index (notify.lua describes
-- the index and who keeps it; drop_slot.lua deletes it with the slots).
--
-- On a single node a topic has one index. On a Redis Cluster it has one
-- per hash tag of its slots, and one call covers the indexes a master
-- serves: it declares one (which routes it to that master) and names the
-- others in ARGV (the allow-cross-slot-keys flag lets it reach keys of
-- other hash slots of its own node). An index not on this node (the
-- client's view of the cluster was stale, or its hash slot is moving)
-- makes a read incomplete: the consumer then looks at every slot.
--
-- KEYS[1] index: ZSET slot -> when the slot may next have work; its member
--   '*' (score +inf) marks it complete: every slot with work has an entry.
-- ARGV[1] op: 'read' | 'mark'
-- ARGV[2] limit: 'read' returns at most this many entries, smallest first
-- ARGV[3] more_indexes: (cluster) further indexes on this node, one per argument (ARGV[3..])
-- 'read' returns { complete (1 if every index is, 0 if one is not, -1 if
--                  one could not be read: not on this node, or a foreign type), more (1 if
--                  entries were left out, else 0), slot, value, slot, value, ... }:
--   every entry left out sorts after every entry returned.
-- 'mark' notes each index complete (a consumer that just looked at every
--   slot, or a topic defined now, which holds nothing); returns 1.
-- Error reply RMQ_WRONGTYPE when the declared index holds a foreign type
-- (a further one that does makes the read incomplete); RMQ_BADARG for an
-- unknown op or a bad limit.

local op = ARGV[1]
if op ~= 'read' and op ~= 'mark' then
  return redis.error_reply('RMQ_BADARG unknown index op ' .. tostring(op))
end
local more_indexes = {}
for i = 3, #ARGV do
  more_indexes[#more_indexes + 1] = ARGV[i]
end
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'zset' and t ~= 'none' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a zset')
end
if op == 'mark' then
  redis.call('ZADD', KEYS[1], '+inf', '*')
  for _, idx in ipairs(more_indexes) do
    -- Not on this node: that index stays incomplete (read says so).
    redis.pcall('ZADD', idx, '+inf', '*')
  end
  return 1
end
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit ~= math.floor(limit) then
  return redis.error_reply('RMQ_BADARG index read limit ' .. tostring(ARGV[2]))
end

local complete = 1
local unreached = false
-- The smallest value an index left out entries from (nil: none did).
local horizon
-- { slot, value (a string, as stored), value (a number) }
local entries = {}

-- Reads one index: its `limit` smallest entries, and whether it is
-- complete. One call for most indexes: '*' sorts last (+inf), so a read
-- of one entry more than the limit that finds it has found everything.
local function read(idx)
  local r = redis.pcall('ZRANGE', idx, 0, limit, 'WITHSCORES')
  if type(r) ~= 'table' or r.err then
    unreached = true
    return
  end
  local seen_star = false
  local taken = 0
  for i = 1, #r, 2 do
    if r[i] == '*' then
      seen_star = true
    elseif taken < limit then
      taken = taken + 1
      entries[#entries + 1] = { r[i], r[i + 1], tonumber(r[i + 1]) }
    end
  end
  if not seen_star then
    if #r / 2 > limit then
      -- Left out some: all of them sort after what was taken.
      local last = entries[#entries][3]
      if not horizon or last < horizon then
        horizon = last
      end
      if not redis.call('ZSCORE', idx, '*') then
        complete = 0
      end
    else
      complete = 0
    end
  end
end

read(KEYS[1])
for _, idx in ipairs(more_indexes) do
  read(idx)
end
if #more_indexes > 0 then
  table.sort(entries, function(a, b)
    return a[3] < b[3]
  end)
end
if unreached then
  complete = -1
end
local out = { complete, 0 }
for _, e in ipairs(entries) do
  if #out - 2 >= 2 * limit or (horizon and e[3] > horizon) then
    out[2] = 1
    break
  end
  out[#out + 1] = e[1]
  out[#out + 1] = e[2]
end
if horizon then
  out[2] = 1
end
return out
