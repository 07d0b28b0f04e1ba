-- renew.lua: extend leases of ONE partition that are still held with their token.
--
-- KEYS[1]  leased zset (score = lease expiry)
-- KEYS[2]  job key prefix: the job hash of ID x is KEYS[2]..x
-- ARGV[1]  lease duration in seconds
-- ARGV[2+2i], ARGV[3+2i]  job id, fencing token
--
-- Returns {expires_at, ok_1, ok_2, ...}; ok = 1 renewed, 0 lease not held
-- (wrong token, not leased, expired or gone: nothing changes).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local exp = now + tonumber(ARGV[1])
local exp_s = string.format('%.17g', exp)
local out = {exp_s}
for i = 2, #ARGV, 2 do
  local key = KEYS[2] .. ARGV[i]
  local f = redis.call('HMGET', key, 'state', 'lease_token', 'lease_expires_at')
  if f[1] == 'leased' and ARGV[i + 1] ~= '' and f[2] == ARGV[i + 1]
      and tonumber(f[3]) > now then
    redis.call('HSET', key, 'lease_expires_at', exp_s)
    redis.call('ZADD', KEYS[1], exp, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
