-- secret.lua: the prefix's receipt key, made by its first caller and read
-- by every later one, so that every server of one prefix signs and checks
-- receipts with the same key (a receipt one server gave out, another can
-- settle; a restart changes nothing).
--
-- KEYS[1] secret: STRING the key (hex)
-- ARGV[1] fresh: a new random key, kept only when none is stored yet
-- Returns the stored key.

redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
