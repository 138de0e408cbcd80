-- Compare-and-set of suspect first-seen records (safety rules 4 and 13).
-- KEYS[1] {prefix}reconcile:suspect:{S}; ARGV[1] key TTL in ms, then triples:
--   "r", seat, "<value>@<ms>[@<mark>]"  record unless a record of the same value exists
--   "c", seat, "<value>"       delete if the record is of that value ("" = any)
-- Triples apply in order. Returns {changed, replaced}: the number of fields
-- changed, and 1 when the key had the wrong type and was replaced (it is
-- ours and holds only derived state), else 0.
--
-- Rule 13: arguments and the key's type are checked, and every decision is
-- made, before the first write.
local ttl = tonumber(ARGV[1])
if ttl == nil or ttl <= 0 or (#ARGV - 1) % 3 ~= 0 then
  return redis.error_reply('record_suspects: bad arguments')
end
for i = 2, #ARGV, 3 do
  if ARGV[i] ~= 'r' and ARGV[i] ~= 'c' then
    return redis.error_reply('record_suspects: unknown operation')
  end
end
local key_type = redis.call('TYPE', KEYS[1]).ok
-- Replacing the key restarts the grace clock of every seat of the
-- showtime: the safe direction (a release can only come later).
local replace = key_type ~= 'hash' and key_type ~= 'none'
-- Read-only phase: the records as they will be (false = absent).
local before, after, order = {}, {}, {}
for i = 2, #ARGV, 3 do
  local op, seat, arg = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if before[seat] == nil then
    local current = false
    if not replace then
      current = redis.call('HGET', KEYS[1], seat)
    end
    before[seat] = current
    after[seat] = current
    order[#order + 1] = seat
  end
  local current = after[seat]
  if op == 'r' then
    if current == false or string.sub(current, 1, 2) ~= string.sub(arg, 1, 2) then
      after[seat] = arg
    end
  elseif current ~= false and (arg == '' or string.sub(current, 1, 2) == arg .. '@') then
    after[seat] = false
  end
end
-- Write phase.
if replace then
  redis.call('DEL', KEYS[1])
end
local changed = 0
for _, seat in ipairs(order) do
  if after[seat] ~= before[seat] then
    if after[seat] == false then
      redis.call('HDEL', KEYS[1], seat)
    else
      redis.call('HSET', KEYS[1], seat, after[seat])
    end
    changed = changed + 1
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {changed, replace and 1 or 0}
