-- leader_renew.lua: extend or give up leadership NAME if still held.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch, expires_at
-- ARGV[1]  holder id
-- ARGV[2]  epoch
-- ARGV[3]  ttl in seconds, or '' to resign (the lease ends now)
--
-- Returns 1 when done, 0 when ARGV[1]/ARGV[2] no longer hold an unexpired lease.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local f = redis.call('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] or not f[3] or tonumber(f[3]) <= now then
  return 0
end
if ARGV[3] == '' then
  redis.call('HSET', KEYS[1], 'holder', '', 'expires_at', 0)
else
  redis.call('HSET', KEYS[1], 'expires_at', string.format('%.17g', now + tonumber(ARGV[3])))
end
return 1
