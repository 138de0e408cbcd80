-- Fenced creation of a missing seat hash; never clobbers one that appeared.
-- KEYS[1] seat hash, KEYS[2] lease, KEYS[3] done (operation id -> reply).
-- ARGV[1] our token, ARGV[2] a unique operation id, then field/value pairs.
-- Returns -1 lease not ours, 0 the hash exists (left alone), 1 created; a
-- retried operation gets its first reply back.
local done = redis.call('HGET', KEYS[3], ARGV[2])
if done then
  return tonumber(done)
end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
local result = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- HSET in slices: Lua's unpack has a stack limit.
  local step = 200
  for i = 3, #ARGV, step do
    local last = math.min(i + step - 1, #ARGV)
    redis.call('HSET', KEYS[1], unpack(ARGV, i, last))
  end
  result = 1
end
redis.call('HSET', KEYS[3], ARGV[2], result)
redis.call('PEXPIRE', KEYS[3], 600000)
return result
