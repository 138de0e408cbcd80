-- Take a showtime lease (safety rule 2). KEYS[1] lease, ARGV[1] our token,
-- ARGV[2] TTL ms. Returns 1 taken, 0 held (a string is someone's lease, ours
-- included: left alone), 2 taken after replacing a key of another type.
-- Rule 13: we only ever write strings here, so a key of another type is
-- nobody's lease: it is replaced, never a stuck lease. The type and the
-- arguments are checked before the first write.
local ttl = tonumber(ARGV[2])
if ARGV[1] == '' or ttl == nil or ttl <= 0 then
  return redis.error_reply('lease_acquire: bad arguments')
end
local key_type = redis.call('TYPE', KEYS[1]).ok
if key_type == 'string' then
  return 0
end
local result = 1
if key_type ~= 'none' then
  redis.call('DEL', KEYS[1])
  result = 2
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return result
