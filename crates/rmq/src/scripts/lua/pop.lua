-- pop.lua: takes due messages of one slot into flight (phase one of two).
-- Includes: layout pending pending_heads pending_resize pending_write pending_take records notify lifecycle fence take
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind: 'p' | 'f' | 'r'; in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2] count: how many messages to take at most (0 only reclaims and reports)
-- ARGV[3] lease_ms: how long a delivery lasts
-- ARGV[4] max_attempts
-- ARGV[5] backoff_ms: first retry delay     ARGV[6] backoff_max_ms     ARGV[7] jitter: in [0,1)
-- ARGV[8] channel: for wake-up notices      ARGV[9] slot: its number   ARGV[10] dead_max: dead letters kept per slot (0 = all)
-- ARGV[11] owner: serial mode's lease owner ('' in parallel mode)   ARGV[12] epoch: its fencing token
-- ARGV[13] dead_ttl_ms: dead letters older than this are dropped, 100 per call at most (0 = kept)
-- Serial mode takes one message, and only when nothing of the slot is in
-- flight; a caller whose lease is not current is refused (RMQ_FENCED,
-- nothing written). Parallel mode takes nothing from a slot a serial owner holds.
-- Nothing is taken from a paused slot (pause.lua); it reports no head and no retry.
-- Before taking, it rolls back expired leases (as failed attempts) and moves
-- priority retries whose backoff is over back to the pending set.
-- Returns: { now, head score or false, next retry ms or false, next lease deadline or false,
--            ended, then per message: delivery id, payload }
--   ended: expired leases rolled back here that ended their message (dead, superseded
--   or cancelled) rather than retrying it
--   head is false when the caller may not take now: in serial mode while something of
--   the slot is in flight; when a parallel caller asks to take (count > 0) while a
--   serial owner leases the slot, and then "next retry" is false and "next lease
--   deadline" is the earlier of the slot lease's end and the first in-flight deadline,
--   so the caller sleeps until then (or a notice) instead of asking again at once.
--   A look (count 0) reports the slot as it is (but for a paused slot: no head, no
--   retry): serial consumers look at their own leased slots that way.
-- A delivery id is "<token>,<attempt>,<score>[,<origin>]|<key>" (see records.lua); settle
-- takes it back to name the delivery.
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

return take_slot(
  ARGV[1],
  -- At most 1000 per call: Lua's unpack is limited (about 8000 values).
  math.min(tonumber(ARGV[2]) or 0, 1000),
  tonumber(ARGV[3]),
  {
    max_attempts = tonumber(ARGV[4]),
    backoff_ms = tonumber(ARGV[5]),
    backoff_max_ms = tonumber(ARGV[6]),
    dead_max = tonumber(ARGV[10]),
    dead_ttl = tonumber(ARGV[13]) or 0,
  },
  tonumber(ARGV[7]),
  ARGV[8],
  ARGV[9],
  ARGV[11] or '',
  ARGV[12] or ''
)
