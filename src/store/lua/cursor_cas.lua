-- Compare-and-set of a sweep cursor. KEYS[1] cursor key,
-- ARGV[1] the value we read ("" = absent), ARGV[2] the new value ("" = delete).
-- Returns 1 written, 0 someone else moved it (left alone).
local current = redis.call('GET', KEYS[1])
if (ARGV[1] == '' and current ~= false) or (ARGV[1] ~= '' and current ~= ARGV[1]) then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
