-- The data marker: a string of the reconciler's own, without expiry, that
-- exists as long as the server keeps its data. A flush, a restart without
-- persistence, a failover to an empty replica or an eviction takes it with
-- the seat hashes; whoever reads it next finds it gone (and sets a new one)
-- or finds another reconciler's new value: either way, Redis lost its data.
-- KEYS[1] the marker; ARGV[1] the value to set where there is none.
-- Returns {1, value} found; {2, previous type} none (or a key of another
-- type, rule 13: replaced) and ARGV[1] set now.
-- Every check comes before the first write. (A dry run reads it with GET.)
if ARGV[1] == nil or ARGV[1] == '' then
  return redis.error_reply('data_marker: bad arguments')
end
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then
  return {1, redis.call('GET', KEYS[1])}
end
if t ~= 'none' then
  redis.call('DEL', KEYS[1])
end
redis.call('SET', KEYS[1], ARGV[1])
return {2, t}
