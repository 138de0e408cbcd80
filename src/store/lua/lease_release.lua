-- Compare-and-delete of our showtime lease. KEYS[1] lease, ARGV[1] token. 1 released, 0 not ours.
-- Rule 13: a key of another type is not ours (checked before GET, which
-- would fail on it).
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
