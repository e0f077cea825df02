-- dead_purge.lua: deletes dead letters of one slot for good.
-- Includes: layout
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] all: '1' for all dead letters (up to the limit), '0' for the merge key in ARGV[3]
-- ARGV[2] limit
-- ARGV[3] key: the merge key (when ARGV[1] is '0')
-- ARGV[4] older_than_ms: all: only letters that died more than this long ago (server clock; '' = any)
-- Returns: the number of dead letters deleted.

local bad = check_types()
if bad then
  return bad
end
local keys
if ARGV[1] == '1' and (ARGV[4] or '') ~= '' then
  local before = '(' .. fmt(now_ms() - tonumber(ARGV[4]))
  local limit = tonumber(ARGV[2])
  keys = redis.call('ZRANGEBYSCORE', K.x, '-inf', before, 'LIMIT', 0, limit)
elseif ARGV[1] == '1' then
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
