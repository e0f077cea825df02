-- peek.lua: the next pending messages of one slot in consumption order,
-- Includes: layout records
-- without taking them (reads only).
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind ('p' | 'f' | 'r')   ARGV[2] limit
-- Returns: { now, then per message: key, payload, attempts, score }

local kind = ARGV[1]
local limit = math.min(tonumber(ARGV[2]) or 0, 1000)
local now = now_ms()
local res = { now }
if limit <= 0 then
  return res
end
local r
if kind == 'p' then
  r = redis.call('ZRANGE', K.q, 0, limit - 1, 'REV', 'WITHSCORES')
else
  r = redis.call('ZRANGE', K.q, 0, limit - 1, 'WITHSCORES')
end
if #r == 0 then
  return res
end
local keys = {}
for i = 1, #r, 2 do
  keys[#keys + 1] = r[i]
end
local payloads = redis.call('HMGET', K.d, unpack(keys))
local metas = redis.call('HMGET', K.a, unpack(keys))
for i, key in ipairs(keys) do
  if payloads[i] then
    local a = 0
    if metas[i] then
      a = meta_parse(metas[i])
    end
    res[#res + 1] = key
    res[#res + 1] = payloads[i]
    res[#res + 1] = a
    res[#res + 1] = r[2 * i]
  end
end
return res
