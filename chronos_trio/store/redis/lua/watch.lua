-- watch.lua: read one job's outcome for a producer and, while the job is not
-- finished, name the waiter's channel in its record (field w), all in one
-- step: a finish after this reading publishes there (notify_done), so a
-- waiter that subscribed first and then watched can never miss it.
--
-- KEYS[1]  the job hash
-- ARGV[1]  the waiter's channel ('' to read only)
--
-- Returns {now, exists (0/1), then when it exists: state, attempts,
-- last_error, finished_at, result, result_until, kind (nil when absent)}. A key
-- that is not a hash is no job. A record of a newer format is read, never
-- written.
--@include check_format
local t = redis.call('TIME')
local now_s = string.format('%.17g', tonumber(t[1]) + tonumber(t[2]) / 1000000)
local f = redis.pcall('HMGET', KEYS[1], 'state', 'attempts', 'last_error', 'finished_at',
  'result', 'result_until', 'v', 'kind')
if f.err then return {now_s, 0} end
if not f[1] and redis.call('EXISTS', KEYS[1]) == 0 then return {now_s, 0} end
local state = f[1]
if ARGV[1] ~= '' and state ~= 'succeeded' and state ~= 'dead' and state ~= 'aborted'
    and check_format(f[7]) ~= 'newer' then
  redis.call('HSET', KEYS[1], 'w', ARGV[1])
end
return {now_s, 1, f[1] or false, f[2] or false, f[3] or false, f[4] or false,
  f[5] or false, f[6] or false, f[8] or false}
