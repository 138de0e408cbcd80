-- Extend our lease. KEYS[1] lease, ARGV[1] token, ARGV[2] TTL ms. 1 renewed, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
