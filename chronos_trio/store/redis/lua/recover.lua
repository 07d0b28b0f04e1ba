-- recover.lua: take back up to ARGV[1] expired leases of ONE partition, earliest
-- expiry first: back to ready, or dead once max_retries + 1 attempts were used
-- (a job that keeps killing its worker must not loop forever).
--
-- KEYS[1]  leased zset (score = lease expiry)
-- KEYS[2]  ready zset (score = run_at)
-- KEYS[3]  dead zset (score = finished_at)
-- KEYS[4]  job key prefix: the job hash of ID x is KEYS[4]..x
-- ARGV[1]  limit (> 0)
--
-- Returns {now, {requeued ids...}, {dead jobs: per job the id then the 13
-- fields kind, payload, run_at, state, attempts, max_retries, timeout,
-- lease_token, lease_owner, lease_expires_at, last_error, created_at, finished_at}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[1])
local requeued, dead = {}, {}
if #expired == 0 then return {now_s, requeued, dead} end
redis.call('ZPOPMIN', KEYS[1], #expired)
for _, id in ipairs(expired) do
  local key = KEYS[4] .. id
  local f = redis.call('HMGET', key, 'attempts', 'max_retries')
  local attempts, max_retries = tonumber(f[1]), tonumber(f[2])
  if attempts > max_retries then
    local err = 'lease expired on attempt ' .. attempts .. ' of ' .. (max_retries + 1)
      .. ' (worker lost); retries exhausted'
    redis.call('HSET', key, 'state', 'dead', 'finished_at', now_s, 'last_error', err,
      'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
    redis.call('ZADD', KEYS[3], now, id)
    dead[#dead + 1] = id
    local g = redis.call('HMGET', key, 'kind', 'payload', 'run_at', 'state', 'attempts',
      'max_retries', 'timeout', 'lease_token', 'lease_owner', 'lease_expires_at', 'last_error',
      'created_at', 'finished_at')
    for k = 1, 13 do dead[#dead + 1] = g[k] or '' end
  else
    redis.call('HSET', key, 'state', 'ready', 'run_at', now_s,
      'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
    redis.call('ZADD', KEYS[2], now, id)
    requeued[#requeued + 1] = id
  end
end
return {now_s, requeued, dead}
