-- leader_acquire.lua: take (or renew, for the same holder) leadership NAME.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch (never reset), expires_at
-- ARGV[1]  holder id
-- ARGV[2]  ttl in seconds
--
-- The hash is judged before anything is written. An unreadable expires_at
-- counts as expired (a lease nobody can prove is held), so leadership can be
-- taken over. An unreadable epoch cannot be continued without risking an
-- epoch issued before (the fence), so nothing changes and it is reported; so
-- is a key that is not a hash.
--
-- Returns {epoch, expires_at, fresh (1 = new epoch)}, {} when another
-- holder's lease has not expired, or {'damaged', reason} (nothing changes).
--@include check_number
--@include show
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local exp = string.format('%.17g', now + tonumber(ARGV[2]))
local f = redis.pcall('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if f.err then return {'damaged', 'the leadership key is not a hash'} end
local epoch = f[2]
if epoch and (#epoch > 15 or not string.find(epoch, '^%d+$')) then
  return {'damaged', "field 'epoch' holds " .. show(epoch) .. ', not an integer'}
end
local until_ = not check_number('expires_at', f[3]) and tonumber(f[3])
if f[1] and f[1] ~= '' and until_ and until_ > now then
  if f[1] ~= ARGV[1] then return {} end
  redis.call('HSET', KEYS[1], 'expires_at', exp)
  return {tonumber(epoch or 0), exp, 0}
end
local next_epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires_at', exp)
return {next_epoch, exp, 1}
