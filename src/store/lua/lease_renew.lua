-- Extend our showtime lease. KEYS[1] lease, ARGV[1] token, ARGV[2] TTL ms. 1 renewed, 0 not ours.
-- Rule 13: the type and the TTL argument are checked before the write.
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl <= 0 then
  return redis.error_reply('lease_renew: bad TTL')
end
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ttl)
end
return 0
