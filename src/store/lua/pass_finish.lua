-- Record a completed pass and release its lease, if the lease is still ours.
-- KEYS[1] the pass lease, KEYS[2] the last-pass record; ARGV[1] our lease
-- value, ARGV[2] the record ("slot_ms finished_ms instance").
-- Returns 1 recorded and released, 0 the lease is not ours any more (fenced:
-- nothing written).
if redis.call('TYPE', KEYS[1]).ok ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- SET replaces a record key of any type (rule 13: ours, derived state).
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
