-- rate.lua: a topic's global delivery rate limit, one bucket per topic,
-- shared by every consumer of every process (GCRA: the bucket is a
-- theoretical arrival time, so it needs no refill timer).
--
-- KEYS[1] bucket: HASH rate (tokens per second; absent or 0: no limit),
--         burst (tokens that may be taken at once, at least 1),
--         tat (theoretical arrival time, server ms)
-- ARGV[1] op: 'take' | 'give' | 'set' | 'drop'   ARGV[2] n (take, give) or rate (set)
-- ARGV[3] burst (set)
-- take: grants up to n tokens now -> { granted, wait ms }: wait is how long
--       until the next token when none was granted (0 otherwise); with no
--       limit set, { n, 0 }.
-- give: returns n tokens taken but not used -> { 0, 0 }
-- set:  sets the rate and burst (rate 0 removes the limit) -> { 0, 0 }
-- drop: deletes the bucket (its topic is deleted) -> { 0, 0 }
-- Over any time span W (ms) a bucket grants at most burst + rate * W / 1000.

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
local op, n = ARGV[1], tonumber(ARGV[2])
if n == nil or n < 0 or n ~= math.floor(n) then
  return redis.error_reply('RMQ_BADARG rate.lua: n is not a whole number >= 0')
end
if op == 'drop' then
  redis.call('UNLINK', KEYS[1])
  return { 0, 0 }
end
if op == 'set' then
  local burst = tonumber(ARGV[3])
  if burst == nil or burst < 0 then
    return redis.error_reply('RMQ_BADARG rate.lua: burst is not a number >= 0')
  end
  if n == 0 then
    redis.call('UNLINK', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'rate', ARGV[2], 'burst', tostring(math.max(burst, 1)))
  end
  return { 0, 0 }
end
local s = redis.call('HMGET', KEYS[1], 'rate', 'burst', 'tat')
local rate = tonumber(s[1] or '0') or 0
if rate <= 0 then
  if op == 'take' then
    return { n, 0 }
  end
  return { 0, 0 }
end
local burst = math.max(tonumber(s[2] or '1') or 1, 1)
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + tonumber(tm[2]) / 1000
local every = 1000 / rate
local tat = math.max(tonumber(s[3] or '0') or 0, now)
if op == 'give' then
  redis.call('HSET', KEYS[1], 'tat', string.format('%.3f', tat - n * every))
  return { 0, 0 }
end
if op ~= 'take' then
  return redis.error_reply('RMQ_BADARG rate.lua: unknown op ' .. tostring(op))
end
-- Tokens available now: those the bucket holds (burst at most).
local free = math.floor((now + burst * every - tat) / every + 1e-9)
local granted = math.max(math.min(n, free), 0)
if granted == 0 then
  return { 0, math.max(math.ceil(tat - (burst - 1) * every - now), 1) }
end
redis.call('HSET', KEYS[1], 'tat', string.format('%.3f', tat + granted * every))
return { granted, 0 }
