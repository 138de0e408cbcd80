-- Fenced creation of a missing seat hash; never clobbers one that appeared.
-- KEYS[1] seat hash, KEYS[2] showtime lease, KEYS[3] done (operation id -> reply),
-- KEYS[4] writing (exists only around the seat writes: its keyspace events
-- bracket our own seat events, as in repair_seats.lua).
-- ARGV[1] our token, ARGV[2] a unique operation id, then field/value pairs.
-- Replies {code, replaced}: code -1 showtime lease not ours, -2 the seat key exists
-- with the wrong type (left alone), 0 the hash exists (left alone),
-- 1 created; replaced = 2 when our done key had the wrong type and was
-- replaced, else 0. A retried operation gets its first code back.
--
-- Rule 13: every check (key types, arguments) comes before the first write,
-- so an error can never leave half a hash behind.
if #ARGV < 4 or (#ARGV - 2) % 2 ~= 0 then
  return redis.error_reply('rebuild_hash: arguments are not field/value pairs')
end
local function key_type(key)
  return redis.call('TYPE', key).ok
end
local done_type = key_type(KEYS[3])
-- Our own key holds only derived state: of the wrong type, it is replaced.
local replace_done = done_type ~= 'hash' and done_type ~= 'none'
if not replace_done then
  local done = tonumber(redis.call('HGET', KEYS[3], ARGV[2]))
  if done then
    return {done, 0}
  end
end
if key_type(KEYS[2]) ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return {-1, 0}
end
local seat_type = key_type(KEYS[1])
local writing_type = key_type(KEYS[4])
local result = 0
if seat_type == 'none' then
  result = 1
elseif seat_type ~= 'hash' then
  result = -2
end
-- Write phase.
local replaced = 0
if replace_done then
  redis.call('DEL', KEYS[3])
  replaced = 2
end
if result == 1 then
  if writing_type ~= 'none' then
    redis.call('DEL', KEYS[4])
  end
  redis.call('HSET', KEYS[4], 'by', 'reconciler')
  -- HSET in slices of whole pairs: Lua's unpack has a stack limit.
  local step = 200
  for i = 3, #ARGV, step do
    local last = math.min(i + step - 1, #ARGV)
    redis.call('HSET', KEYS[1], unpack(ARGV, i, last))
  end
  redis.call('DEL', KEYS[4])
end
redis.call('HSET', KEYS[3], ARGV[2], result)
redis.call('PEXPIRE', KEYS[3], 600000)
return {result, replaced}
