-- Remove rows MySQL now has from the head of the audit backlog (safety rule
-- 10): ARGV holds rows as backlog_read.lua returned them, in order. Each
-- is removed only while it is still at the head, so a row read by two
-- reconcilers at once (both wrote it: INSERT IGNORE by fix_id) leaves once,
-- a retried ack removes nothing more, and rows pushed since (at the tail)
-- or not written stay.
-- KEYS[1] {prefix}reconcile:audit-backlog.
-- Returns the number of rows removed. A key of another type is left alone
-- (the next read moves it aside).
if redis.call('TYPE', KEYS[1]).ok ~= 'list' then
  return 0
end
local removed = 0
for i = 1, #ARGV do
  if redis.call('LINDEX', KEYS[1], 0) == ARGV[i] then
    redis.call('LPOP', KEYS[1])
    removed = removed + 1
  end
end
return removed
