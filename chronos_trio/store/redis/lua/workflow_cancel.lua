-- workflow_cancel.lua: mark a workflow cancelled (WorkflowRole.cancel_workflow),
-- atomically with reading its record; an earlier mark stands.
--
-- KEYS[1]  the workflow's record hash ({ns:wf:<id>}:w, see workflow_save.lua)
--
-- Returns {} when there is no record (nothing marked), else
-- {tree, created, first kind, cancelled at}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local t = redis.call('TIME')
redis.call('HSETNX', KEYS[1], 'x', string.format('%d.%06d', t[1], t[2]))
return redis.call('HMGET', KEYS[1], 't', 'c', 'k', 'x')
