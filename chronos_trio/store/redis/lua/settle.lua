-- settle.lua: apply lease outcomes in ONE partition, each fenced by its token.
--
-- KEYS[1]  ready zset (score = run_at)
-- KEYS[2]  leased zset (score = lease expiry)
-- KEYS[3]  retry_wait zset (score = run_at)
-- KEYS[4]  succeeded zset (retained jobs; score = end of retention)
-- KEYS[5]  dead zset (score = finished_at)
-- KEYS[6]  job key prefix: the job hash of ID x is KEYS[6]..x
-- ARGV[1+6i .. 6+6i], per settlement i: job id, fencing token,
--          kind ('s' succeeded, 'r' retry, 'd' dead, 'l' release), error text,
--          retry_delay (s), retain_for (s)
--
-- Returns {now, ok_1, ok_2, ...}; ok = 0 when the lease is no longer held with
-- that token (or expired): then the job is not touched at all.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
local out = {now_s}
local settled = {}
for i = 1, #ARGV, 6 do
  local id = ARGV[i]
  local key = KEYS[6] .. id
  local f = redis.call('HMGET', key, 'state', 'lease_token', 'lease_expires_at', 'attempts',
    'run_at')
  if f[1] ~= 'leased' or ARGV[i + 1] == '' or f[2] ~= ARGV[i + 1]
      or tonumber(f[3]) <= now then
    out[#out + 1] = 0
  else
    settled[#settled + 1] = id
    local kind = ARGV[i + 2]
    if kind == 's' then
      local retain = tonumber(ARGV[i + 5])
      if retain > 0 then
        local until_ = now + retain
        redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s, 'run_at', until_,
          'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
        redis.call('ZADD', KEYS[4], until_, id)
      else
        redis.call('DEL', key)
      end
    elseif kind == 'r' then
      local due = now + math.max(0, tonumber(ARGV[i + 4]))
      redis.call('HSET', key, 'state', 'retry_wait', 'run_at', due, 'last_error', ARGV[i + 3],
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      redis.call('ZADD', KEYS[3], due, id)
    elseif kind == 'd' then
      redis.call('HSET', key, 'state', 'dead', 'last_error', ARGV[i + 3], 'finished_at', now_s,
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      redis.call('ZADD', KEYS[5], now, id)
    else
      -- release: back to ready at once, keeping its due time; the attempt is given back
      redis.call('HSET', key, 'state', 'ready', 'attempts', math.max(0, tonumber(f[4]) - 1),
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      redis.call('ZADD', KEYS[1], f[5], id)
    end
    out[#out + 1] = 1
  end
end
-- one ZREM for the batch (chunked below Lua's unpack() limit)
for c = 1, #settled, 1000 do
  redis.call('ZREM', KEYS[2], unpack(settled, c, math.min(c + 999, #settled)))
end
return out
