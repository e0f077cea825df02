-- settle_take.lua: settles deliveries of one slot, then takes the slot's
-- next due messages in the same call: a consumer that acks one message and
-- has room gets the next one in one round trip (BullMQ's moveToFinished
-- does the same). It runs settle.lua's body, then pop.lua's: what it
-- does is what those two calls made back to back would do, with nothing of
-- another client in between.
-- Includes: layout pending pending_heads pending_resize pending_write pending_take records notify lifecycle fence take ending
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind: 'p' | 'f' | 'r'; in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2] max_attempts   ARGV[3] backoff_ms: first retry delay   ARGV[4] backoff_max_ms   ARGV[5] jitter: in [0,1)
-- ARGV[6] channel: for wake-up notices   ARGV[7] slot: its number   ARGV[8] dead_max: dead letters kept per slot (0 = all)
-- ARGV[9] owner: serial mode's lease owner ('' in parallel mode)   ARGV[10] epoch: its fencing token
-- ARGV[11] dead_ttl_ms: dead letters older than this are dropped (0 = kept)
-- ARGV[12] count: how many messages to take at most, after the settle (as pop's count, at least 1)
-- ARGV[13] lease_ms: how long a delivery taken here lasts
-- ARGV[14] ops: the operations, as settle.lua's ARGV[12]
-- ARGV[15..] args: the operations' args, as settle.lua's ARGV[13..].
-- A parallel caller on a single node takes nothing while the topic's marks
-- (notify.lua) tell of better work in another slot than this slot's head
-- (a higher priority; or due more than SLACK_MS earlier): no consumer has
-- been told of that work yet, and this one's fetch loop takes it once its
-- room comes back: the call takes that mark for it (as the consumer's
-- BZMPOP on the marks would) and returns it, so that the fetch loop pops
-- that slot next. (Equal priorities of two slots have no order between
-- them: each slot's FIFO part counts its own sends.)
-- Returns: { settle.lua's reply, pop.lua's reply or false[, slot, mark] }
-- (slot and mark: the mark it took for the caller). False: nothing
-- was taken because the caller's serial lease is not current (every
-- settle code is then -2, nothing changed), no settle ended its delivery
-- (all stale), a mark tells of better work elsewhere, or a slot key holds
-- a foreign type (found by the take, after the settle wrote).
-- Error reply as settle.lua's (nothing written).

-- (settle_slot and take_slot take the kind as received: its case says
-- the topic's pending layout.)
local kind = pending_use(ARGV[1])
local cfg = {
  max_attempts = tonumber(ARGV[2]),
  backoff_ms = tonumber(ARGV[3]),
  backoff_max_ms = tonumber(ARGV[4]),
  dead_max = tonumber(ARGV[8]),
  dead_ttl = tonumber(ARGV[11]) or 0,
}
local jitter = tonumber(ARGV[5])
local channel, slot = ARGV[6], ARGV[7]
local owner, epoch = ARGV[9] or '', ARGV[10] or ''

-- The take reads r and a with plain calls after the settle wrote, which
-- checks them only on some paths: their types are checked first.
local bad = check_keys('r', 'a')
if bad then
  return bad
end
-- The settle leaves the slot's index entry to this call: a take sets it
-- exactly, and every way out without one brings it up to date as a settle
-- alone would have (index_ended).
local codes, fenced = settle_slot(ARGV[1], cfg, jitter, channel, slot, owner, epoch, ARGV[14] or '', 15, true)
if codes.err then
  return codes
end
if fenced then
  return { codes, false }
end
-- Settles that ended nothing (every one stale) take nothing: the caller
-- learns its delivery was not current, and nothing is taken unseen.
local ended_any = false
for i = 2, #codes do
  if codes[i] >= 1 then
    ended_any = true
  end
end
if not ended_any then
  index_ended(kind, slot)
  return { codes, false }
end
-- How much earlier another slot's work must be due to stop a take here
-- (time-based topics; ms, as SLACK_MS in consumer/schedule.rs).
local SLACK_MS = 100

-- A mark that tells of work in another slot that comes before this
-- slot's head, as slot and value, or nil (read with pcall, as every use
-- of the marks).
local function better_marked()
  if not MARKS or owner ~= '' then
    return nil
  end
  local _, s = head(kind)
  if not s then
    return nil
  end
  local r = redis.pcall('ZRANGE', MARKS, '0', '1', 'WITHSCORES')
  if type(r) ~= 'table' then
    return nil
  end
  for i = 1, #r, 2 do
    local v = tonumber(r[i + 1])
    if r[i] ~= slot then
      if kind == 'p' then
        -- A pending head's mark is minus its score (<= 0), the priority
        -- in its high part; a retry's (a time) tells no priority.
        if v <= 0 and math.floor(-v / TWO32) > math.floor(s / TWO32) then
          return r[i], v
        end
      elseif v < s - SLACK_MS then
        return r[i], v
      end
    end
  end
  return nil
end

local marked, mark = better_marked()
if marked then
  index_ended(kind, slot)
  redis.pcall('ZREM', MARKS, marked)
  return { codes, false, tonumber(marked), mark }
end
local count = math.max(math.min(tonumber(ARGV[12]) or 1, 1000), 1)
local taken = take_slot(ARGV[1], count, tonumber(ARGV[13]), cfg, jitter, channel, slot, owner, epoch)
if taken.err then
  index_ended(kind, slot)
  return { codes, false }
end
return { codes, taken }
