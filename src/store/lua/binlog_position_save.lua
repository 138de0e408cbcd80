-- Saves a shard's MySQL binlog position (a string of ours).
-- KEYS[1] the position key; ARGV[1] the value this reader saved last, or ""
-- to take the key whatever it holds (a reader starting); ARGV[2] the new value.
-- Returns 1 written, 0 another reader saved since (left alone: the reader
-- that started last owns the key), 2 the key had the wrong type and was
-- replaced (rule 13: it holds only where to resume, so a wrong-shaped one is
-- overwritten, never a blocker), 3 the key was gone (Redis lost it: a
-- restart, a flush, an eviction) and this reader, which holds the stream,
-- saved it again: an absent key is nobody's save. Every check comes before
-- the first write.
if ARGV[2] == '' then
  return redis.error_reply('binlog_position_save: empty value')
end
local key_type = redis.call('TYPE', KEYS[1]).ok
local result = 1
if key_type ~= 'string' and key_type ~= 'none' then
  result = 2
elseif ARGV[1] ~= '' and key_type == 'none' then
  result = 3
elseif ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if result == 2 then
  redis.call('DEL', KEYS[1])
end
redis.call('SET', KEYS[1], ARGV[2])
return result
