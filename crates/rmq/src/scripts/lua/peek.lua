-- peek.lua: pending messages of one slot or of many slots of one node in
-- consumption order, without taking them (reads only).
-- Includes: layout pending pending_heads pending_read records
--
-- KEYS: the ten slot keys (see layout.lua) of each slot, slot after slot
--   (more than one slot on a single Redis node only).
-- ARGV[1] kind ('p' | 'f' | 'r')   ARGV[2] limit: per slot, at most 1000
-- ARGV[3] from: how many of each slot's first messages to skip
-- Returns: { now, then per slot one array: { members scanned, then per message:
--            key, payload, attempts, score } } (a member without its payload
--            is scanned and skipped: the next page starts after it)
-- Error reply RMQ_BADARG when KEYS are not whole slots.

local kind = pending_use(ARGV[1])
local limit = math.min(tonumber(ARGV[2]) or 0, 1000)
local from = math.max(tonumber(ARGV[3]) or 0, 0)
local slots = slots_in_keys()
if not slots then
  return redis.error_reply('RMQ_BADARG peek: ten keys per slot')
end

local function slot_peek()
  local res = { 0 }
  if limit <= 0 then
    return res
  end
  local r = pending_range(from, limit)
  res[1] = #r / 2
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
end

local out = { now_ms() }
for i = 1, slots do
  use_slot(i)
  out[#out + 1] = slot_peek()
end
return out
