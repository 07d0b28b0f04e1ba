-- worker_unregister.lua: remove one worker's registry entry (a clean stop).
--
-- KEYS[1]  registry hash: worker id -> the entry's JSON (records._workers)
-- KEYS[2]  registry zset: worker id -> when its entry lapses (epoch seconds)
-- ARGV[1]  worker id
--
-- Returns 1 when an entry was removed, 0 when there was none.
local n = redis.call('ZREM', KEYS[2], ARGV[1])
return math.max(n, redis.call('HDEL', KEYS[1], ARGV[1]))
