-- Append audit rows to the audit backlog (safety rules 10 and 13).
-- KEYS[1] {prefix}reconcile:audit-backlog (a list); KEYS[2] an unused name in
-- the same slot to move a key of another type aside to; ARGV the rows.
-- Returns {length, moved}: the backlog's length after the push; moved = 1
-- when KEYS[1] was of another type and was renamed to KEYS[2], else 0.
-- A backlog of the wrong type may hold rows that someone needs: it is moved
-- aside for an operator, never deleted, and never keeps our rows out.
-- Rule 13: the arguments and both keys' types are checked before the first
-- write.
if #ARGV == 0 then
  return redis.error_reply('backlog_push: no rows')
end
local backlog_type = redis.call('TYPE', KEYS[1]).ok
local moved = 0
if backlog_type ~= 'list' and backlog_type ~= 'none' then
  if redis.call('TYPE', KEYS[2]).ok ~= 'none' then
    return redis.error_reply('backlog_push: the aside name is taken')
  end
  moved = 1
end
-- Write phase.
if moved == 1 then
  redis.call('RENAME', KEYS[1], KEYS[2])
end
-- RPUSH in slices: Lua's unpack has a stack limit.
local length = 0
local step = 200
for i = 1, #ARGV, step do
  length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + step - 1, #ARGV)))
end
return {length, moved}
