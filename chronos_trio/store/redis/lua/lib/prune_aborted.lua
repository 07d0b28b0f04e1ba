--@include aborted_key
-- Drop the aborted marks older than the oldest entry of dead_zset (their jobs
-- were trimmed): all of them when it is empty. With pcall: never fails.
local function prune_aborted(prefix, dead_zset)
  local oldest = redis.call('ZRANGE', dead_zset, 0, 0, 'WITHSCORES')
  if oldest[2] then
    redis.pcall('ZREMRANGEBYSCORE', aborted_key(prefix), '-inf', '(' .. oldest[2])
  else
    redis.pcall('DEL', aborted_key(prefix))
  end
end
