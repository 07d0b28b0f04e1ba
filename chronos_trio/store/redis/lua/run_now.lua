-- run_now.lua: make one scheduled, retry_wait or dead job ready at once (a dead
-- job gets its attempts reset).
--
-- KEYS[1]  scheduled zset, KEYS[2] retry_wait zset, KEYS[3] dead zset,
-- KEYS[4]  ready zset (score = run_at)
-- KEYS[5]  job key prefix: the job hash of ID x is KEYS[5]..x
-- ARGV[1]  job id
--
-- Returns 1 when moved, 0 when absent or in another state.
local key = KEYS[5] .. ARGV[1]
local state = redis.call('HGET', key, 'state')
local from
if state == 'scheduled' then
  from = KEYS[1]
elseif state == 'retry_wait' then
  from = KEYS[2]
elseif state == 'dead' then
  from = KEYS[3]
else
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREM', from, ARGV[1])
redis.call('HSET', key, 'state', 'ready', 'run_at', string.format('%.17g', now), 'finished_at', '')
if state == 'dead' then redis.call('HSET', key, 'attempts', 0) end
redis.call('ZADD', KEYS[4], now, ARGV[1])
return 1
