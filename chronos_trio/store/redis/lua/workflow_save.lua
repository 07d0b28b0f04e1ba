-- workflow_save.lua: save a workflow's record once (WorkflowRole.save_workflow);
-- a record already there stands unchanged (starting the same workflow again
-- is the same run).
--
-- KEYS[1]  the workflow's record hash ({ns:wf:<id>}:w): t tree, c created
--          (store clock, s), k first kind, x cancelled at (absent: not)
-- ARGV[1]  the tree (JSON), ARGV[2] the first step's kind, ARGV[3] ttl in ms
--
-- Returns 1 when saved now, 0 when a record existed.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = string.format('%d.%06d', t[1], t[2])
redis.call('HSET', KEYS[1], 't', ARGV[1], 'c', now, 'k', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
