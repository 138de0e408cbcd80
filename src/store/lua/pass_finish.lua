-- Record a completed pass and release its lease (or keep it: the daemon's
-- own shard stays held between passes), if the lease is still ours.
-- KEYS[1] the pass lease, KEYS[2] the last-pass record; ARGV[1] our lease
-- value, ARGV[2] the record ("slot_ms finished_ms instance"), ARGV[3] "1"
-- to release the lease, "0" to keep it.
-- Returns 1 recorded (and released when asked), 0 the lease is not ours
-- any more (fenced: nothing written).
if ARGV[3] ~= '0' and ARGV[3] ~= '1' then
  return redis.error_reply('pass_finish: bad arguments')
end
if redis.call('TYPE', KEYS[1]).ok ~= 'string' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- SET replaces a record key of any type (rule 13: ours, derived state).
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
end
return 1
