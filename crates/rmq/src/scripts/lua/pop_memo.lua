-- pop_memo.lua: what a pop keeps of its answer for a second run (memo.lua):
-- the header and the delivery ids, not the payloads (a batch can be large).
-- A second run reads each payload again and leaves out a delivery that is
-- no longer in flight (its lease ran out and it was rolled back meanwhile).
-- settle_take.lua keeps its take's answer the same way.

local function pop_pack(answer)
  local kept = { answer[1], answer[2], answer[3], answer[4], answer[5] }
  for i = 6, #answer, 2 do
    kept[#kept + 1] = answer[i]
  end
  return kept
end

local function pop_unpack(kept)
  local answer = { kept[1], kept[2], kept[3], kept[4], kept[5] }
  for i = 6, #kept do
    local id = kept[i]
    if redis.call('ZSCORE', K.f, id) then
      local bar = string.find(id, '|', 1, true)
      local payload = bar and redis.call('HGET', K.d, string.sub(id, bar + 1))
      if payload then
        answer[#answer + 1] = id
        answer[#answer + 1] = payload
      end
    end
  end
  return answer
end
