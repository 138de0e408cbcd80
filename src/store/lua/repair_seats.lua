-- Fenced per-seat compare-and-set (safety rules 1, 2 and 13).
-- KEYS[1] seat hash      {prefix}seat:{S}
-- KEYS[2] showtime lease {prefix}reconcile:lock:{S}
-- KEYS[3] suspects       {prefix}reconcile:suspect:{S}
-- KEYS[4] done           {prefix}reconcile:done:{S}  (operation id -> reply, for retries)
-- KEYS[5] writing        {prefix}reconcile:writing:{S} (created before the seat
--         writes and deleted after them: its hset and del keyspace events
--         bracket our own seat events, which then ask for no check)
-- ARGV[1] our showtime lease token, ARGV[2] a unique operation id, then triples:
-- seat, observed ("" = field absent), target ("0", "1" or "2").
-- Replies (nothing is written unless the first element is 1):
--   {-1}         the showtime lease is not ours
--   {-2, i}      KEYS[i] is seatflow's key of the wrong type (left alone)
--   {1, replaced, r1, r2, ...} with ri = 1 applied, 0 value changed since the
--                scan (left alone); replaced = 1 when our suspect key, + 2
--                when our done key, had the wrong type and was replaced.
-- A retry of an operation that already ran (its reply was lost) gets the
-- first reply back and changes nothing: exactly-once repairs and audit.
--
-- Rule 13: a script is atomic but not transactional, so everything that can
-- fail is checked first (key types, arguments) and the writes come last;
-- an error can never leave a seat changed without its reply (and audit).
if (#ARGV - 2) % 3 ~= 0 then
  return redis.error_reply('repair_seats: arguments are not seat triples')
end
for i = 3, #ARGV, 3 do
  local target = ARGV[i + 2]
  if target ~= '0' and target ~= '1' and target ~= '2' then
    return redis.error_reply('repair_seats: target is not 0, 1 or 2')
  end
end
local function key_type(key)
  return redis.call('TYPE', key).ok
end
-- Our own keys hold only derived state: one of the wrong type is replaced
-- (rule 13), never a reason to stop a repair.
local done_type = key_type(KEYS[4])
local replace_done = done_type ~= 'hash' and done_type ~= 'none'
if not replace_done then
  local done = redis.call('HGET', KEYS[4], ARGV[2])
  if done then
    local ok, reply = pcall(cjson.decode, done)
    if ok and type(reply) == 'table' then
      return reply
    end
  end
end
local lease_type = key_type(KEYS[2])
if lease_type ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return {-1}
end
local seat_type = key_type(KEYS[1])
if seat_type ~= 'hash' and seat_type ~= 'none' then
  return {-2, 1}
end
local writing_type = key_type(KEYS[5])
local suspect_type = key_type(KEYS[3])
local replace_suspects = suspect_type ~= 'hash' and suspect_type ~= 'none'
-- Read-only phase: decide every seat.
local hash_exists = seat_type == 'hash'
local planned = {}
local apply = {}
local writes = false
for i = 3, #ARGV, 3 do
  local seat, observed, target = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local current = planned[seat]
  if current == nil then
    current = redis.call('HGET', KEYS[1], seat)
  end
  local same
  if observed == '' then
    -- Filling an absent field is only right inside an existing hash; a
    -- vanished hash is the missing-hashes job's to rebuild whole.
    same = hash_exists and current == false
  else
    same = current == observed
  end
  apply[#apply + 1] = same
  if same then
    planned[seat] = target
    writes = true
  end
end
-- Write phase: nothing below can fail on a key's type or an argument.
local replaced = 0
if replace_suspects then
  -- Deleting the records restarts every seat's grace clock of this
  -- showtime: the safe direction (a release can only come later).
  redis.call('DEL', KEYS[3])
  replaced = replaced + 1
end
if replace_done then
  redis.call('DEL', KEYS[4])
  replaced = replaced + 2
end
if writes then
  if writing_type ~= 'none' then
    redis.call('DEL', KEYS[5])
  end
  redis.call('HSET', KEYS[5], 'by', 'reconciler')
end
local out = {1, replaced}
for n, same in ipairs(apply) do
  local i = 3 + (n - 1) * 3
  if same then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    if not replace_suspects then
      redis.call('HDEL', KEYS[3], ARGV[i])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if writes then
  redis.call('DEL', KEYS[5])
end
redis.call('HSET', KEYS[4], ARGV[2], cjson.encode(out))
redis.call('PEXPIRE', KEYS[4], 600000)
return out
