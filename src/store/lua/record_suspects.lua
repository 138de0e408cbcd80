-- Compare-and-set of suspect first-seen records (safety rule 4).
-- KEYS[1] {prefix}reconcile:suspect:{S}; ARGV[1] key TTL in ms, then triples:
--   "r", seat, "<value>@<ms>"  record unless a record of the same value exists
--   "c", seat, "<value>"       delete if the record is of that value ("" = any)
-- Returns the number of fields changed.
local changed = 0
for i = 2, #ARGV, 3 do
  local op, seat, arg = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local current = redis.call('HGET', KEYS[1], seat)
  if op == 'r' then
    local value = string.sub(arg, 1, 2)
    if current == false or string.sub(current, 1, 2) ~= value then
      redis.call('HSET', KEYS[1], seat, arg)
      changed = changed + 1
    end
  elseif current ~= false and (arg == '' or string.sub(current, 1, 2) == arg .. '@') then
    redis.call('HDEL', KEYS[1], seat)
    changed = changed + 1
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return changed
