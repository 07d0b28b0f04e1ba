-- worker_beat.lua: record or refresh one worker's registry entry, judged by Redis TIME.
--
-- KEYS[1]  registry hash: worker id -> the entry's JSON (records._workers)
-- KEYS[2]  registry zset: worker id -> when its entry lapses (epoch seconds)
-- ARGV[1]  worker id
-- ARGV[2]  the entry's JSON (it holds its ttl: a reader's last beat is the
--          lapse time minus the ttl)
-- ARGV[3]  ttl in seconds (> 0)
-- ARGV[4]  lapsed entries (of any worker) to remove at most, before writing
--
-- Bounded work: lapsed entries are never listed anyway (workers_list.lua
-- reads only unlapsed ones); removing a few per beat keeps them from piling up.
--
-- Returns the store's now (the last beat recorded), as text.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%.17g', now),
  'LIMIT', 0, tonumber(ARGV[4]))
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], string.format('%.17g', now + tonumber(ARGV[3])), ARGV[1])
return string.format('%.17g', now)
