-- define_topic.lua: stores a topic definition once; later definitions must match.
--
-- KEYS[1] index: the prefix's topics (HASH: topic name -> definition JSON)
-- ARGV[1] name: the topic's   ARGV[2] definition: JSON (canonical: produced by one serializer)
-- Returns: { 0, definition } created | { 1, definition } already defined the same way
--          | { 2, existing definition } defined differently (nothing written)

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  if existing == ARGV[2] then
    return { 1, existing }
  end
  return { 2, existing }
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return { 0, ARGV[2] }
