-- delete.lua: delete one job that is not leased.
--
-- KEYS[1]  scheduled zset, KEYS[2] ready zset, KEYS[3] leased zset,
-- KEYS[4]  retry_wait zset, KEYS[5] succeeded zset, KEYS[6] dead zset
-- KEYS[7]  job key prefix: the job hash of ID x is KEYS[7]..x
-- ARGV[1]  job id
--
-- Returns 1 deleted, 0 absent, -1 leased (left alone).
local key = KEYS[7] .. ARGV[1]
local state = redis.call('HGET', key, 'state')
if not state then return 0 end
if state == 'leased' then return -1 end
local zsets = {scheduled = KEYS[1], ready = KEYS[2], retry_wait = KEYS[4],
  succeeded = KEYS[5], dead = KEYS[6]}
local z = zsets[state]
if z then redis.call('ZREM', z, ARGV[1]) end
redis.call('DEL', key)
return 1
