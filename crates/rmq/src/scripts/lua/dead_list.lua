-- dead_list.lua: dead letters of one slot or of many slots of one node,
-- oldest death first (reads only).
-- Includes: layout records
--
-- KEYS: the ten slot keys (see layout.lua) of each slot, slot after slot
--   (more than one slot on a single Redis node only).
-- ARGV[1] limit: per slot, at most 1000   ARGV[2] from: how many of each slot's oldest to skip
-- Returns: { now, then per slot one array: { members scanned, then per dead
--            letter: key, payload, attempts, score, dead ms, deaths, error } }
--            (a member without its record is scanned and skipped)
-- Error reply RMQ_BADARG when KEYS are not whole slots.

local limit = math.min(tonumber(ARGV[1]) or 0, 1000)
local from = math.max(tonumber(ARGV[2]) or 0, 0)
local slots = slots_in_keys()
if not slots then
  return redis.error_reply('RMQ_BADARG dead_list: ten keys per slot')
end

local function slot_dead()
  local res = { 0 }
  if limit <= 0 then
    return res
  end
  local members = redis.call('ZRANGE', K.x, from, from + limit - 1)
  res[1] = #members
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
end

local out = { now_ms() }
for i = 1, slots do
  use_slot(i)
  out[#out + 1] = slot_dead()
end
return out
