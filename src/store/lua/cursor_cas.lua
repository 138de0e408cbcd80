-- Compare-and-set of a sweep cursor. KEYS[1] cursor key,
-- ARGV[1] the value we read ("" = absent), ARGV[2] the new value ("" = delete).
-- Returns 1 written, 0 someone else moved it (left alone), 2 the key had the
-- wrong type and was replaced (rule 13: the cursor is ours and holds only
-- where to resume, so a wrong-shaped one is overwritten, never a blocker).
local key_type = redis.call('TYPE', KEYS[1]).ok
local result = 1
if key_type ~= 'string' and key_type ~= 'none' then
  redis.call('DEL', KEYS[1])
  result = 2
else
  local current = redis.call('GET', KEYS[1])
  if (ARGV[1] == '' and current ~= false) or (ARGV[1] ~= '' and current ~= ARGV[1]) then
    return 0
  end
end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2])
elseif result == 1 then
  redis.call('DEL', KEYS[1])
end
return result
