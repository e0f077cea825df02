-- dead_list.lua: dead letters of one slot, oldest death first (reads only).
-- Includes: layout records
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] limit
-- Returns: { per dead letter: key, payload, attempts, score, dead ms, deaths, error }

local limit = tonumber(ARGV[1])
local res = {}
if limit <= 0 then
  return res
end
local members = redis.call('ZRANGE', K.x, 0, limit - 1)
for _, key in ipairs(members) do
  local rec = redis.call('HGET', K.X, key)
  if rec then
    local a, s, dm, deaths, err, p = dead_parse(rec)
    res[#res + 1] = key
    res[#res + 1] = p
    res[#res + 1] = a
    res[#res + 1] = fmt(s)
    res[#res + 1] = dm
    res[#res + 1] = deaths
    res[#res + 1] = err
  end
end
return res
