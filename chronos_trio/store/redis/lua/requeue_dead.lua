-- requeue_dead.lua: make the ARGV[1] oldest dead jobs of ONE partition ready
-- again, with attempts reset.
--
-- KEYS[1]  dead zset (score = finished_at)
-- KEYS[2]  ready zset (score = run_at)
-- KEYS[3]  job key prefix: the job hash of ID x is KEYS[3]..x
-- ARGV[1]  how many (> 0)
--
-- Returns how many were moved.
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
if #popped == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
for i = 1, #popped, 2 do
  redis.call('HSET', KEYS[3] .. popped[i], 'state', 'ready', 'run_at', now_s, 'attempts', 0,
    'finished_at', '')
  redis.call('ZADD', KEYS[2], now, popped[i])
end
return #popped / 2
