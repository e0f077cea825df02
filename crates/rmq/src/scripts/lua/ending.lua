-- ending.lua: ends or extends in-flight deliveries of one slot (phase two):
-- the body of settle.lua, which settle_take.lua also runs before it takes.
-- Its contract (operations, codes, errors) is settle.lua's header.

-- kind: 'p' | 'f' | 'r' as received (upper case: a compact topic, see
-- pending_use); cfg: max_attempts, backoff_ms, backoff_max_ms,
-- dead_max, dead_ttl; owner and epoch: serial mode's fence ('' in
-- parallel mode); ops: one letter per operation, whose args are
-- ARGV[at..], the last ones of the call; index_later: the caller brings
-- the slot's head index entry up to date itself (settle_take's take sets
-- it exactly), else the settle does (index_ended). Returns settle.lua's
-- reply (or an error reply, nothing written) and whether the caller's
-- serial lease was not current (then nothing changed).
local function settle_slot(kind, cfg, jitter, channel, slot, owner, epoch, ops, at, index_later)
  local now = now_ms()
  kind = pending_use(kind)

  -- Decode the operations and check their arguments before any write.
  local n = #ops
  local op_of, id_of, num_of, err_of = {}, {}, {}, {}
  for i = 1, n do
    local op = string.sub(ops, i, i)
    op_of[i] = op
    id_of[i] = ARGV[at]
    at = at + 1
    if op == 'n' or op == 'e' then
      num_of[i] = tonumber(ARGV[at]) or -1
      at = at + 1
    end
    if op == 'n' or op == 'd' or op == 'l' then
      err_of[i] = ARGV[at]
      at = at + 1
    end
    if not id_of[i] or ((op == 'n' or op == 'd' or op == 'l') and not err_of[i])
        or (op == 'e' and not num_of[i]) or not string.find('andrel', op, 1, true) then
      return redis.error_reply('RMQ_BADARG settle operation ' .. i .. ' is malformed')
    end
  end
  if at ~= #ARGV + 1 then
    return redis.error_reply('RMQ_BADARG settle got ' .. #ARGV .. ' args for ' .. n .. ' operations')
  end

  local codes = { now }
  if not lease_check(owner, epoch, now) then
    for i = 1, n do
      codes[i + 1] = -2
    end
    return codes, true
  end
  local c = counters()
  local hm, hs = head(kind)
  local requeued = false
  local seen = {}
  for i = 1, n do
    seen[id_of[i]] = (seen[id_of[i]] or 0) + 1
    codes[i + 1] = -1
  end
  -- Only acks of distinct ids (the common case): l and q were read above, n is
  -- read here and f before the first write; the acks write f, d and m, and a
  -- duplicate parked behind an acked message also writes n, a and q. Anything
  -- else checks every key.
  local only_fast_acks = true
  for i = 1, n do
    if op_of[i] ~= 'a' or seen[id_of[i]] ~= 1 then
      only_fast_acks = false
    end
  end
  local any_parked = false
  local bad
  if only_fast_acks then
    -- The shape of the pending set: a typed read of m, which a take after
    -- this settle (settle_take) reads anyway.
    pending_state()
    any_parked = redis.call('HLEN', K.n) > 0
    if any_parked then
      bad = check_keys('d', 'm', 'a')
    else
      bad = check_keys('d', 'm')
    end
  else
    bad = check_types()
  end
  if bad then
    return bad
  end
  if not only_fast_acks then
    -- every key was checked: dead letters past their time go
    trim_dead(cfg.dead_ttl, now, c)
  end

  -- Ends a current delivery of key: a duplicate parked behind it moves in.
  local function release_parked_of(key)
    local parked = redis.call('HGET', K.n, key)
    if parked then
      release_parked(key, parked)
      requeued = true
    end
    return parked
  end

  -- Fast path: acks of ids that appear once in this call.
  local fast, fast_i = {}, {}
  for i = 1, n do
    if op_of[i] == 'a' and seen[id_of[i]] == 1 then
      fast[#fast + 1] = id_of[i]
      fast_i[#fast_i + 1] = i
    end
  end
  if #fast > 0 then
    local fs = redis.call('ZMSCORE', K.f, unpack(fast))
    local ok, okeys = {}, {}
    for j, id in ipairs(fast) do
      if fs[j] then
        local key = flight_key(id)
        if key then
          ok[#ok + 1] = id
          okeys[#okeys + 1] = key
          codes[fast_i[j] + 1] = 1
        end
      end
      seen[id] = 0
    end
    if #ok > 0 then
      redis.call('ZREM', K.f, unpack(ok))
      redis.call('HDEL', K.d, unpack(okeys))
      c.acked = c.acked + #ok
      if any_parked or (not only_fast_acks and redis.call('HLEN', K.n) > 0) then
        local parked = redis.call('HMGET', K.n, unpack(okeys))
        for j, key in ipairs(okeys) do
          if parked[j] then
            release_parked(key, parked[j])
            requeued = true
          end
        end
      end
    end
  end

  -- Slow path: everything else, in order.
  for i = 1, n do
    local op, id = op_of[i], id_of[i]
    if seen[id] ~= 0 then
      local code = -1
      local _, a, s, key, origin = flight_parse(id)
      if key and redis.call('ZSCORE', K.f, id) then
        code = 1
        if op == 'a' then
          redis.call('ZREM', K.f, id)
          redis.call('HDEL', K.d, key)
          c.acked = c.acked + 1
          release_parked_of(key)
        elseif op == 'e' then
          local num = num_of[i]
          if num ~= num or num > MAX_TIME - now then
            num = MAX_TIME - now
          end
          redis.call('ZADD', K.f, 'XX', fmt(now + math.max(num, 1)), id)
        elseif parked_cancelled(redis.call('HGET', K.n, key) or '') then
          -- cancelled in flight: a nack, a dead letter or a release ends it
          redis.call('ZREM', K.f, id)
          end_cancelled(key, redis.call('HGET', K.n, key), c)
          code = 4
          requeued = true
        elseif op == 'd' then
          redis.call('ZREM', K.f, id)
          to_dead(key, a, s, redis.call('HGET', K.d, key) or '', err_of[i], now, cfg, c)
          code = 2
          release_parked_of(key)
        elseif op == 'r' then
          redis.call('ZREM', K.f, id)
          local parked = redis.call('HGET', K.n, key)
          if parked then
            redis.call('HDEL', K.d, key)
            release_parked(key, parked)
            c.merged = c.merged + 1
            code = 3
          else
            if a > 1 then
              redis.call('HSET', K.a, key, meta_make(a - 1, s, nil, origin))
            end
            pending_put({ key }, { s })
          end
          requeued = true
        else
          local r = fail(kind, id, err_of[i], num_of[i] or -1, now, cfg, c, (jitter + i * 0.6180339887) % 1, op == 'l')
          if r == 'dead' then
            code = 2
          elseif r == 'superseded' then
            code = 3
          elseif r == 'cancelled' then
            code = 4
          end
          requeued = true
        end
      end
      codes[i + 1] = code
    end
  end

  flush_counters(c)
  if requeued then
    announce(kind, channel, slot, hm, hs, c)
  end
  if not index_later then
    index_ended(kind, slot)
  end
  return codes, false
end
