-- replace_topic.lua: replaces (or removes) a topic definition, if it is still the one the caller read.
--
-- KEYS[1] index: the prefix's topics (HASH: topic name -> definition JSON)
-- ARGV[1] name: the topic's   ARGV[2] old: the definition the caller read
-- ARGV[3] new: the definition to store ('' removes the topic's definition)
-- Returns: { 1 } replaced | { 0, current definition } changed meanwhile (nothing written)
--          | { -1 } no such topic (nothing written)

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then
  return { -1 }
end
if current ~= ARGV[2] then
  return { 0, current }
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return { 1 }
