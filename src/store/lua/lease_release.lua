-- Compare-and-delete of our lease. KEYS[1] lease, ARGV[1] token. 1 released, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
