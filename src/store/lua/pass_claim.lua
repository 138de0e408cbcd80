-- Claim a shard's pass (the lease among reconcilers on the same data).
-- KEYS[1] the pass lease, KEYS[2] the record of the shard's last completed
-- pass (same hash tag); ARGV[1] our lease value ("token instance"),
-- ARGV[2] lease TTL ms, ARGV[3] the schedule slot (ms) this pass is for, or 0
-- for a pass outside the schedule (`once`, the admin endpoint).
-- Returns {code, text, pttl, replaced}:
--   1 claimed; text = the last completed pass's record ("" if none)
--   0 held by someone else; text = their lease value, pttl = its PTTL
--     (-1: a lease without expiry, which is reported, never taken over)
--   2 this slot's pass is already done; text = its record
-- replaced: 1 if a key of ours had the wrong type and was replaced (rule 13).
-- Every check comes before the first write.
local ttl = tonumber(ARGV[2])
local slot = tonumber(ARGV[3])
if ttl == nil or ttl <= 0 or slot == nil then
  return redis.error_reply('pass_claim: bad arguments')
end
local lease_type = redis.call('TYPE', KEYS[1]).ok
local record_type = redis.call('TYPE', KEYS[2]).ok
local record = ''
if record_type == 'string' then
  record = redis.call('GET', KEYS[2])
end
local done_slot = tonumber(string.match(record, '^(%d+) '))
if slot > 0 and done_slot ~= nil and done_slot >= slot then
  return {2, record, 0, 0}
end
if lease_type == 'string' then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then
    return {0, holder, redis.call('PTTL', KEYS[1]), 0}
  end
end
local replaced = 0
if lease_type ~= 'string' and lease_type ~= 'none' then
  redis.call('DEL', KEYS[1])
  replaced = 1
end
if record_type ~= 'string' and record_type ~= 'none' then
  redis.call('DEL', KEYS[2])
  replaced = 1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return {1, record, ttl, replaced}
