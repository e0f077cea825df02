-- dead_purge.lua: deletes dead letters of one slot for good.
-- Includes: layout
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] '1' for all dead letters (up to the limit), '0' for the merge key in ARGV[3]
-- ARGV[2] limit
-- ARGV[3] merge key (when ARGV[1] is '0')
-- Returns: the number of dead letters deleted.

local bad = check_types()
if bad then
  return bad
end
local keys
if ARGV[1] == '1' then
  keys = redis.call('ZRANGE', K.x, 0, tonumber(ARGV[2]) - 1)
else
  keys = { ARGV[3] }
end
local purged = 0
for _, key in ipairs(keys) do
  if redis.call('HDEL', K.X, key) == 1 then
    purged = purged + 1
  end
  redis.call('ZREM', K.x, key)
end
return purged
