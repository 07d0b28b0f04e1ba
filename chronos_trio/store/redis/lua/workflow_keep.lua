-- workflow_keep.lua: keep a workflow's record at least ARGV[1] ms more
-- (WorkflowRole.keep_workflows): never shortened.
--
-- KEYS[1]  the workflow's record hash ({ns:wf:<id>}:w, see workflow_save.lua)
-- ARGV[1]  ms
--
-- Returns the ms it lasts now; -2 when there is no record (nothing made).
local left = redis.call('PTTL', KEYS[1])
if left == -2 then return -2 end
local want = tonumber(ARGV[1])
if left >= 0 and left < want then
  redis.call('PEXPIRE', KEYS[1], want)
  left = want
end
return left
