-- Which of the reconciler's uses this user's ACL refuses (rule 18), asked
-- of redis.acl_check_cmd: nothing is run, nothing written.
-- ARGV: the uses, each as its word count then its words (a command and
-- its arguments). Returns the 1-based numbers of the refused uses, or -1
-- where the server cannot tell (Redis before 7.0).
if redis.acl_check_cmd == nil then
  return -1
end
local refused = {}
local i, use = 1, 0
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  use = use + 1
  if not redis.acl_check_cmd(unpack(ARGV, i + 1, i + n)) then
    refused[#refused + 1] = use
  end
  i = i + n + 1
end
return refused
