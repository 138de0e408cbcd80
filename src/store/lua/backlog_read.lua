-- Read rows at the head of the audit backlog, leaving them there (safety
-- rules 10 and 13): they leave only once MySQL has them (backlog_ack.lua),
-- so a lost reply or a crash between the two loses no row.
-- KEYS[1] {prefix}reconcile:audit-backlog (a list); KEYS[2] an unused name in
-- the same slot to move a key of another type aside to; ARGV[1] the most
-- rows to read.
-- Returns {moved, row, row, ...}: moved = 1 when KEYS[1] was of another type
-- and was renamed to KEYS[2] (then no rows), else 0.
-- A backlog of the wrong type may hold rows that someone needs: it is moved
-- aside for an operator, never deleted, and never blocks the next push.
-- Rule 13: the argument and both keys' types are checked before the first
-- write.
local count = tonumber(ARGV[1])
if count == nil or count <= 0 then
  return redis.error_reply('backlog_read: bad count')
end
local backlog_type = redis.call('TYPE', KEYS[1]).ok
if backlog_type == 'none' then
  return {0}
end
if backlog_type ~= 'list' then
  if redis.call('TYPE', KEYS[2]).ok ~= 'none' then
    return redis.error_reply('backlog_read: the aside name is taken')
  end
  redis.call('RENAME', KEYS[1], KEYS[2])
  return {1}
end
local out = {0}
for _, row in ipairs(redis.call('LRANGE', KEYS[1], 0, count - 1)) do
  out[#out + 1] = row
end
return out
