-- leader_get.lua: the unexpired holder of leadership NAME, judged by Redis TIME.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch, expires_at
--
-- Returns {holder, epoch, expires_at} or {} when nobody holds it.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local f = redis.call('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if not f[1] or f[1] == '' or tonumber(f[3]) <= now then return {} end
return {f[1], tonumber(f[2]), f[3]}
