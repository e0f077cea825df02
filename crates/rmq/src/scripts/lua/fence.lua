-- fence.lua: serial mode's check of the caller's slot lease (fencing).

-- Serial mode: is the slot leased to `owner` with `epoch`, right now?
-- Also returns whether any live lease is held (parallel consumers skip such slots).
-- Returns: whether the caller may go on (a serial caller must hold the live
-- lease at its epoch; a parallel caller always may), whether a serial owner
-- holds the slot now, until when (ms), and whether the slot is paused (the
-- lease hash also holds the topic's pause flag, `paused`, see pause.lua:
-- one read answers both), and whether the slot is serial: an owner is
-- recorded, live or not (a release clears it, and is refused while a
-- delivery is in flight, so a delivery of a serial slot always finds one).
-- The lease hash as read by this call: no script that checks a lease
-- writes one, so a call that settles and then takes reads it once.
local LEASE_READ
local function lease_check(owner, epoch, now)
  if not LEASE_READ then
    LEASE_READ = redis.call('HMGET', K.l, 'owner', 'epoch', 'until', 'paused')
  end
  local l = LEASE_READ
  local till = tonumber(l[3] or '0') or 0
  local serial = l[1] ~= false and l[1] ~= ''
  local live = serial and till > now
  local paused = l[4] ~= false
  if owner == '' then
    return true, live, till, paused, serial
  end
  return live and l[1] == owner and l[2] == epoch, live, till, paused, serial
end

local function fenced_reply(slot, epoch)
  return redis.error_reply('RMQ_FENCED slot ' .. slot .. ' is no longer leased to this consumer at epoch ' .. epoch)
end
