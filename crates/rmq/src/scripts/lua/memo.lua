-- memo.lua: a call that runs twice answers the same and changes nothing.
--
-- A Redis Cluster client re-sends a command after a broken connection or a
-- time-out (not only after a redirect), and rmq itself retries a call whose
-- answer was lost while the cluster fails over: a script may then run a
-- second time. A pop that ran twice would leave its first batch in flight
-- unseen for a whole lease; a send would report "merged" and shift a
-- '+delay' due time; an ack would answer "stale".
--
-- So such a call names itself: KEYS[11] (a slot script's; room.lua's is
-- its KEYS[3], set by its codec as memo_key_at) is '<base>:req:<ttl ms>.<id>'
-- (same hash tag as the slot's keys, a fresh random id per call, the same
-- on every retry). The first run stores its answer there for <ttl ms>; a
-- second run finds it and returns it without running. Without KEYS[11] (a
-- single node, where nothing re-sends) this costs nothing.
--
-- The script body runs as rmq_main() below this text; a script may set
-- memo_pack / memo_unpack to store less than its whole answer (pop: the
-- delivery ids without payloads), and memo_key_at when its request key is
-- not KEYS[11].

-- A single node's KEYS[11] is the topic's index of slot heads (notify.lua),
-- which has no hash tag; a request key always has its slot's, and no index
-- name (':heads#') may be taken for one.
local MEMO = KEYS[memo_key_at or 11]
if MEMO and (not string.find(MEMO, '{', 1, true) or string.find(MEMO, ':heads#', 1, true)) then
  MEMO = nil
end
if MEMO then
  local seen = redis.call('GET', MEMO)
  if seen then
    local answer = cmsgpack.unpack(seen)
    if memo_unpack then
      answer = memo_unpack(answer)
    end
    return answer
  end
end
local answer = rmq_main()
if MEMO and type(answer) == 'table' and answer.err == nil then
  local ttl = tonumber(string.match(MEMO, ':req:(%d+)%.%x+$')) or 60000
  local kept = answer
  if memo_pack then
    kept = memo_pack(answer)
  end
  redis.call('SET', MEMO, cmsgpack.pack(kept), 'PX', ttl)
end
return answer
