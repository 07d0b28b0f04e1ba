-- group_status.lua: how far ONE workflow group is (read-only).
--
-- KEYS[1]  the group's hash (see group_arrive.lua: field = member index,
--          value = '=' .. result, or '-' for a member that kept no result)
-- ARGV[1]  how a failed member's outcome starts (records/_workflow.py
--          FAILED_OUTCOME)
--
-- Returns {members arrived, {indexes of the failed ones}} ({0, {}} for a
-- group unknown or expired).
local all = redis.call('HGETALL', KEYS[1])
local mark = '=' .. ARGV[1]
local failed = {}
for k = 1, #all, 2 do
  if string.sub(all[k + 1], 1, #mark) == mark then failed[#failed + 1] = tonumber(all[k]) end
end
return {#all / 2, failed}
