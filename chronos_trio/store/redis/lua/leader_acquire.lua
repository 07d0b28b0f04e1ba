-- leader_acquire.lua: take (or renew, for the same holder) leadership NAME.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch (never reset), expires_at
-- ARGV[1]  holder id
-- ARGV[2]  ttl in seconds
--
-- Returns {epoch, expires_at, fresh (1 = new epoch)} or {} when another
-- holder's lease has not expired.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local exp = string.format('%.17g', now + tonumber(ARGV[2]))
local f = redis.call('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if f[1] and f[1] ~= '' and tonumber(f[3]) > now then
  if f[1] ~= ARGV[1] then return {} end
  redis.call('HSET', KEYS[1], 'expires_at', exp)
  return {tonumber(f[2]), exp, 0}
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires_at', exp)
return {epoch, exp, 1}
