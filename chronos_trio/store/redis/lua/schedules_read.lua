-- schedules_read.lua: every stored schedule of leadership NAME and their
-- version, read in one atomic step (ScheduleStoreRole.stored_schedules).
--
-- KEYS[1]  hash of NAME's stored schedules: id -> '<paused 0|1>|<updated_at>|<definition>'
-- KEYS[2]  NAME's schedules version (a counter)
--
-- Returns {version or false, {id, value, id, value, ...}}.
local v = redis.call('GET', KEYS[2])
return {v, redis.call('HGETALL', KEYS[1])}
