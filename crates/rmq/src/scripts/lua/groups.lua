-- groups.lua: the serial groups a topic has had, noted in the topic index
-- so that a topic delete finds (and deletes) their membership hashes.
--
-- KEYS[1] index: the prefix's topics (HASH: topic name -> definition JSON; a
--         group is the field '<topic>:group:<group>', which no topic name can be)
-- ARGV[1] op: 'note' | 'forget'   ARGV[2] field: '<topic>:group:<group>'
-- Returns: 1

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('RMQ_WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. t .. ', expected a hash')
end
if ARGV[1] == 'note' then
  redis.call('HSET', KEYS[1], ARGV[2], '1')
elseif ARGV[1] == 'forget' then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  return redis.error_reply('RMQ_BADARG unknown groups op ' .. tostring(ARGV[1]))
end
return 1
