-- records.lua: how rmq writes what it keeps per message in Redis values:
-- attempts and score of a message waiting again (a), delivery ids (f),
-- parked duplicates (n), dead-letter records (X), priority scores.

-- "<attempts>,<score>", then ",o<origin>" (the token of the message's
-- first delivery, which its later deliveries keep: see flight_make; the
-- 'o' tells it from the third field older versions wrote), then
-- "|<error>" when it waits after a failed attempt.
local function meta_make(attempts, score, err, origin)
  local v = attempts .. ',' .. fmt(score)
  if origin then
    v = v .. ',o' .. origin
  end
  if err then
    return v .. '|' .. err
  end
  return v
end

-- Returns attempts, score.
local function meta_parse(v)
  local a, s = string.match(v, '^(%d+),(%-?%d+)')
  return tonumber(a), tonumber(s)
end

-- The origin a waiting message keeps from its earlier deliveries, or nil.
local function meta_origin(v)
  return string.match(v, '^%d+,%-?%d+,o(%d+)')
end

-- The error of the failed attempt a message waits after, or nil.
local function meta_error(v)
  local at = string.find(v, '|', 1, true)
  if at then
    return string.sub(v, at + 1)
  end
  return nil
end

-- A cancelled in-flight message is marked in `n` by an 'x' before the
-- parked record: 'x' alone (nothing parked) or 'x<score>|<payload>' (a
-- message of the key sent after the cancel waits behind it). Its delivery
-- then ends with a nack, a dead letter, a release or a lease expiry
-- instead of a retry; a duplicate parked behind it moves in as usual.
local CANCELLED = 'x'

local function parked_cancelled(v)
  return string.byte(v, 1) == 120 -- 'x'
end

-- A delivery id (the in-flight member): score is kept as the string it was
-- read as, so the id needs no number formatting. A redelivery carries the
-- message's origin, the token of its first delivery (a string of digits),
-- after the score: "<token>,<attempts>,<score>,<origin>|<key>". The origin
-- names the message across its deliveries (a forwarder deduplicates on it).
local function flight_make(token, attempts, score, key, origin)
  if attempts == 1 then
    return fmt(token) .. ',1,' .. score .. '|' .. key
  end
  if origin then
    return fmt(token) .. ',' .. fmt(attempts) .. ',' .. score .. ',' .. origin .. '|' .. key
  end
  return fmt(token) .. ',' .. fmt(attempts) .. ',' .. score .. '|' .. key
end

-- The merge key of a delivery id (nil for a malformed one).
local function flight_key(id)
  local bar = string.find(id, '|', 1, true)
  if not bar then
    return nil
  end
  return string.sub(id, bar + 1)
end

-- Returns token, attempts, score, key, origin (the token itself for a
-- first delivery or an id without one); nil for a malformed id.
local function flight_parse(id)
  local t, a, s, o, p = string.match(id, '^(%d+),(%d+),([^|,]+),?(%d*)|()')
  if not t then
    return nil
  end
  if o == '' then
    o = t
  end
  return t, tonumber(a), tonumber(s), string.sub(id, p), o
end

local function parked_make(score, payload)
  return fmt(score) .. '|' .. payload
end

-- Returns score, payload of the parked duplicate (nil when only a cancel
-- mark is there).
local function parked_parse(v)
  local s, p = string.match(v, '^x?(%-?%d+)|()')
  if not s then
    return nil
  end
  return tonumber(s), string.sub(v, p)
end

local function dead_make(attempts, score, dead_ms, deaths, err, payload)
  return attempts .. ',' .. fmt(score) .. ',' .. fmt(dead_ms) .. ',' .. deaths .. ',' .. #err .. '|' .. err .. payload
end

-- Returns attempts, score, dead_ms, deaths, error, payload.
local function dead_parse(v)
  local a, s, dm, c, el, p = string.match(v, '^(%d+),(%-?%d+),(%d+),(%d+),(%d+)|()')
  el = tonumber(el)
  return tonumber(a), tonumber(s), tonumber(dm), tonumber(c), string.sub(v, p, p + el - 1), string.sub(v, p + el)
end

-- Priority score: higher priority first, then lower sequence (FIFO).
local function priority_score(priority, seq)
  return priority * TWO32 + (TWO32 - 1 - (seq % TWO32))
end

local function priority_reorder(score, priority)
  return priority * TWO32 + (score % TWO32)
end
