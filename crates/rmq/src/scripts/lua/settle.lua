-- settle.lua: ends or extends in-flight deliveries of one slot (phase two).
-- Includes: layout pending pending_heads pending_resize pending_write records notify lifecycle fence ending
--
-- KEYS: the ten slot keys (see layout.lua).
-- ARGV[1] kind: 'p' | 'f' | 'r'; in upper case ('P' | 'F' | 'R') when the topic's pending layout is compact (pending.lua)
-- ARGV[2] max_attempts   ARGV[3] backoff_ms: first retry delay   ARGV[4] backoff_max_ms   ARGV[5] jitter: in [0,1)
-- ARGV[6] channel: for wake-up notices   ARGV[7] slot: its number   ARGV[8] dead_max: dead letters kept per slot (0 = all)
-- ARGV[9] owner: serial mode's lease owner ('' in parallel mode)   ARGV[10] epoch: its fencing token
-- ARGV[11] dead_ttl_ms: dead letters older than this are dropped (0 = kept)
-- ARGV[12] ops: the operations, one letter each, in order:
--   'a' ack: the message is done and gone                      args: id
--   'n' nack: failed; retry after <ms> (-1 = the topic's backoff)
--       or dead after the last attempt                         args: id, ms, error text
--   'd' dead: failed for good; straight to the dead letters    args: id, error text
--   'e' extend: the lease now ends <ms> from now               args: id, ms
--   'r' release: give the message back untouched (the attempt
--       is not counted)                                        args: id
--   'l' lost: serial mode, the caller lost the slot's lease while
--       handling it: back at once at its place, ahead of the
--       entity's later messages (the attempt is counted; dead
--       after the last)                                        args: id, error text
-- ARGV[13..] args: the operations' args, in the same order.
-- A delivery is named by the id pop returned; an id that is not in flight
-- (lease expired and rolled back, or taken again) is refused.
-- Acks of ids that appear once take a fast path: a few calls for the whole batch.
-- Returns: { now, code per group... } with codes
--    1 done   2 dead   3 superseded by a duplicate that arrived in flight
--    4 cancelled: the message was cancelled in flight and ends here (not retried, not kept)
--   -1 stale: not the current delivery (nothing changed)
--   -2 fenced: serial mode and the caller's lease is not current (nothing changed)
-- Error reply RMQ_WRONGTYPE when a slot key holds a foreign type (nothing written).

return (settle_slot(
  ARGV[1],
  {
    max_attempts = tonumber(ARGV[2]),
    backoff_ms = tonumber(ARGV[3]),
    backoff_max_ms = tonumber(ARGV[4]),
    dead_max = tonumber(ARGV[8]),
    dead_ttl = tonumber(ARGV[11]) or 0,
  },
  tonumber(ARGV[5]),
  ARGV[6],
  ARGV[7],
  ARGV[9] or '',
  ARGV[10] or '',
  ARGV[12] or '',
  13
))
