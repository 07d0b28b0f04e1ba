-- leader_renew.lua: extend or give up leadership NAME if still held.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch, expires_at
-- ARGV[1]  holder id
-- ARGV[2]  epoch
-- ARGV[3]  ttl in seconds, or '' to resign (the lease ends now)
--
-- An unreadable expires_at (or a key that is not a hash) means the lease is
-- not held: nothing changes.
--
-- Returns 1 when done, 0 when ARGV[1]/ARGV[2] no longer hold an unexpired lease.
--@include check_number
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local f = redis.pcall('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if f.err then return 0 end
local until_ = not check_number('expires_at', f[3]) and tonumber(f[3])
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] or not until_ or until_ <= now then
  return 0
end
if ARGV[3] == '' then
  redis.call('HSET', KEYS[1], 'holder', '', 'expires_at', 0)
else
  redis.call('HSET', KEYS[1], 'expires_at', string.format('%.17g', now + tonumber(ARGV[3])))
end
return 1
