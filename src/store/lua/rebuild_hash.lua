-- Fenced creation of a missing seat hash; never clobbers one that appeared.
-- KEYS[1] seat hash, KEYS[2] lease. ARGV[1] our token, then field/value pairs.
-- Returns -1 lease not ours, 0 the hash exists (left alone), 1 created.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- HSET in slices: Lua's unpack has a stack limit.
local step = 200
for i = 2, #ARGV, step do
  local last = math.min(i + step - 1, #ARGV)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, last))
end
return 1
