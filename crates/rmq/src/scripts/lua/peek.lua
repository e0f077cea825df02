-- peek.lua: the next pending messages of one slot in consumption order,
-- without taking them (reads only).
--
-- KEYS: the eight slot keys (see common.lua).
-- ARGV[1] kind ('p' | 'f' | 'r')   ARGV[2] limit
-- Returns: { now, then per message: key, payload, attempts, score }

local kind = ARGV[1]
local limit = tonumber(ARGV[2])
local now = now_ms()
local res = { now }
if limit <= 0 then
  return res
end
local members
if kind == 'p' then
  members = redis.call('ZRANGE', K.q, 0, limit - 1, 'REV')
else
  members = redis.call('ZRANGE', K.q, 0, limit - 1)
end
for _, key in ipairs(members) do
  local rec = redis.call('HGET', K.d, key)
  if rec then
    local a, s, _, p = rec_parse(rec)
    res[#res + 1] = key
    res[#res + 1] = p
    res[#res + 1] = a
    res[#res + 1] = fmt(s)
  end
end
return res
