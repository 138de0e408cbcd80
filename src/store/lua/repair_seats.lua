-- Fenced per-seat compare-and-set (safety rules 1 and 2).
-- KEYS[1] seat hash {prefix}seat:{S}
-- KEYS[2] lease     {prefix}reconcile:lock:{S}
-- KEYS[3] suspects  {prefix}reconcile:suspect:{S}
-- KEYS[4] done      {prefix}reconcile:done:{S}  (operation id -> reply, for retries)
-- ARGV[1] our lease token, ARGV[2] a unique operation id, then triples:
-- seat, observed ("" = field absent), target.
-- Returns {-1} when the lease is not ours (nothing written), else
-- {1, r1, r2, ...} with ri = 1 applied, 0 value changed since the scan (left alone).
-- A retry of an operation that already ran (its reply was lost) gets the
-- first reply back and changes nothing: exactly-once repairs and audit.
local done = redis.call('HGET', KEYS[4], ARGV[2])
if done then
  return cjson.decode(done)
end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return {-1}
end
local hash_exists = redis.call('EXISTS', KEYS[1]) == 1
local out = {1}
for i = 3, #ARGV, 3 do
  local seat, observed, target = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local current = redis.call('HGET', KEYS[1], seat)
  local same
  if observed == '' then
    -- Filling an absent field is only right inside an existing hash; a
    -- vanished hash is the missing-hashes job's to rebuild whole.
    same = hash_exists and current == false
  else
    same = current == observed
  end
  if same then
    redis.call('HSET', KEYS[1], seat, target)
    redis.call('HDEL', KEYS[3], seat)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
redis.call('HSET', KEYS[4], ARGV[2], cjson.encode(out))
redis.call('PEXPIRE', KEYS[4], 600000)
return out
