-- leader_get.lua: the unexpired holder of leadership NAME, judged by Redis TIME.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch, expires_at
--
-- A hash whose epoch or expires_at is unreadable (or a key that is not a
-- hash) has no holder anyone can prove.
--
-- Returns {holder, epoch, expires_at} or {} when nobody holds it.
--@include check_number
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local f = redis.pcall('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if f.err then return {} end
local until_ = not check_number('expires_at', f[3]) and tonumber(f[3])
if not f[1] or f[1] == '' or not until_ or until_ <= now then return {} end
if not f[2] or #f[2] > 15 or not string.find(f[2], '^%d+$') then return {} end
return {f[1], tonumber(f[2]), f[3]}
