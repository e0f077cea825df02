-- take.lua: takes due messages of one slot into flight (phase one of two):
-- the body of pop.lua, which settle_take.lua also runs right after a settle.
-- Its contract (arguments, reply, errors) is pop.lua's header.

-- kind: 'p' | 'f' | 'r' as received (upper case: a compact topic, see
-- pending_use); wanted: messages to take at most (0 only
-- reclaims and reports; at most 1000); lease: ms; cfg: max_attempts,
-- backoff_ms, backoff_max_ms, dead_max, dead_ttl; owner and epoch: serial
-- mode's fence ('' in parallel mode). Returns pop.lua's reply, or an error
-- reply (nothing written).
local function take_slot(kind, wanted, lease, cfg, jitter, channel, slot, owner, epoch)
  local count = wanted
  local now = now_ms()
  kind = pending_use(kind)

  local fence_ok, leased, leased_until, paused, serial = lease_check(owner, epoch, now)
  if not fence_ok then
    return fenced_reply(slot, epoch)
  end
  local blocked = false
  if (owner == '' and leased) or paused then
    count = 0
    blocked = true
  end

  local c = counters()
  local hm, hs = head(kind)

  -- 1. Roll back expired leases, oldest first. The first lease deadline
  -- and (priority) the first retry time are read first: only a slot with
  -- one due reads which are (most calls find none), and a call that rolls
  -- back and requeues nothing knows both firsts at its end without reading
  -- them again (r is written only for priority topics: lifecycle.lua).
  local f_first = first_score(K.f)
  local expired = {}
  if f_first and f_first <= now then
    expired = redis.call('ZRANGEBYSCORE', K.f, '-inf', fmt(now), 'LIMIT', '0', '100')
  end
  local r_first = false
  local ready = {}
  if kind == 'p' then
    r_first = first_score(K.r)
    if r_first and r_first <= now then
      ready = redis.call('ZRANGEBYSCORE', K.r, '-inf', fmt(now), 'LIMIT', '0', '1000')
    end
  end
  local moved = #expired > 0 or #ready > 0
  local has_meta = redis.call('HLEN', K.a) > 0
  checked('a')
  if count > 0 then
    -- The shape of the pending set, which the take reads anyway: read now,
    -- it checks m's type too.
    pending_state()
  end
  -- l, q, f, r and a were read above and nothing is written before this
  -- check: taking writes q, f, a, m and reads d; rolling back and retrying
  -- touch every key.
  local bad = check_all_or(#expired > 0 or #ready > 0, 'd', 'm')
  if not bad and cfg.dead_ttl > 0 then
    bad = check_keys('x', 'X')
  end
  if bad then
    return bad
  end
  trim_dead(cfg.dead_ttl, now, c)
  -- Leases that ran out and ended their message (dead, superseded or
  -- cancelled): the caller gives a bounded topic's room back for them.
  -- In a serial slot the owner that took it is gone (frozen, crashed, cut
  -- off): the message goes back at its place, not after a backoff, so the
  -- next owner handles it before the entity's later messages (I5). (A
  -- serial caller got past the fence, so its slot is serial too.)
  local ended = 0
  for i, id in ipairs(expired) do
    if fail(kind, id, 'lease expired', -1, now, cfg, c, (jitter + i * 0.6180339887) % 1, serial) ~= 'retry' then
      ended = ended + 1
    end
  end

  -- Whether anything is in flight (after the rollbacks).
  local flying = f_first ~= false
  if #expired > 0 then
    flying = redis.call('ZCARD', K.f) > 0
  end
  if owner ~= '' then
    if flying then
      count = 0
      blocked = true
    else
      count = math.min(count, 1)
    end
  end

  -- 2. Priority retries whose backoff is over go back with their old score.
  if kind == 'p' then
    if #ready > 0 then
      local metas = redis.call('HMGET', K.a, unpack(ready))
      local back, back_scores = {}, {}
      for i, key in ipairs(ready) do
        if metas[i] then
          local _, s = meta_parse(metas[i])
          back[#back + 1] = key
          -- (A record without a score fails the call here, before any write.)
          back_scores[#back_scores + 1] = s or error('rmq: the retry record of ' .. key .. ' has no score')
        end
      end
      redis.call('ZREM', K.r, unpack(ready))
      pending_put(back, back_scores)
    end
  end

  if moved then
    has_meta = redis.call('HLEN', K.a) > 0 -- rolled-back messages wrote theirs
  end

  -- 3. Take up to count due messages.
  local keys, scores = pending_take(count, kind ~= 'p' and now or nil)

  local out = {}
  local got = #keys
  local added = 0 -- deliveries put in flight (a key without a payload is not)
  if got > 0 then
    local payloads = redis.call('HMGET', K.d, unpack(keys))
    -- Attempts of redelivered messages; their meta moves into the delivery id.
    local metas = {}
    if has_meta then
      metas = redis.call('HMGET', K.a, unpack(keys))
      local had = {}
      for i, key in ipairs(keys) do
        if metas[i] then
          had[#had + 1] = key
        end
      end
      if #had > 0 then
        redis.call('HDEL', K.a, unpack(had))
      end
    end
    local tok = redis.call('HINCRBY', K.m, 'tok', fmt(got)) - got
    if tok == 0 then
      -- The slot's first delivery since its topic was defined: its tokens
      -- start from the server clock (ms x 1000), so that they do not repeat
      -- when a topic is deleted and defined again, nor between deployments,
      -- and a message's stable id (see flight_make) stays its own.
      tok = now * 1000
      redis.call('HSET', K.m, 'tok', fmt(tok + got))
    end
    local deadline = fmt(now + lease)
    local fargs = {}
    for i, key in ipairs(keys) do
      local p = payloads[i]
      if p then
        tok = tok + 1
        local a, origin = 1, nil
        if metas[i] then
          a = meta_parse(metas[i]) + 1
          origin = meta_origin(metas[i])
        end
        local id = flight_make(tok, a, scores[i], key, origin)
        fargs[#fargs + 1] = deadline
        fargs[#fargs + 1] = id
        out[#out + 1] = id
        out[#out + 1] = p
      end
    end
    if #fargs > 0 then
      redis.call('ZADD', K.f, unpack(fargs))
      added = #fargs / 2
      c.delivered = c.delivered + added
    end
  end

  flush_counters(c)
  if #expired > 0 then
    announce(kind, channel, slot, hm, hs, c)
  end

  local _, qs = head(kind)
  local retry_at, flight_at = r_first, f_first
  if moved then
    retry_at, flight_at = kind == 'p' and first_score(K.r), first_score(K.f)
    flying = flight_at ~= false
  elseif added > 0 and (not flight_at or now + lease < flight_at) then
    flight_at = now + lease -- the deliveries just taken
  end
  index_put(slot, index_of(kind, qs, retry_at, flight_at, paused))
  -- A parallel take that leaves work behind marks it (notify.lua): more due
  -- now wakes a second consumer to help, and work due later is left to
  -- whoever takes the mark (the popper does not keep it); a serial owner's
  -- slot is marked at the end of its lease, when it may be taken. Not a
  -- look, nor a paused slot (its resume marks it).
  if owner == '' and wanted > 0 and not paused then
    local v = index_of(kind, qs, retry_at, false, false)
    if v and leased then
      v = leased_until
    end
    mark_exact(slot, v)
  end
  if paused then
    -- Nothing to take until a resume, which sends a notice; expired leases
    -- are still rolled back (the first in-flight deadline is reported).
    qs, retry_at = nil, false
  elseif owner == '' and leased and wanted > 0 then
    -- A serial owner's slot: nothing to take here before its lease ends.
    qs, retry_at = nil, false
    if not flight_at or leased_until < flight_at then
      flight_at = leased_until
    end
  elseif blocked and flying then
    -- Nothing to take until the in-flight delivery ends (its lease deadline is reported).
    qs = nil
  end
  local res = { now, qs or false, retry_at, flight_at, ended }
  for i = 1, #out do
    res[#res + 1] = out[i]
  end
  return res
end
