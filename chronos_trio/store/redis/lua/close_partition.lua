-- close_partition.lua: close ONE partition of a draining version if it holds no
-- job, so that a writer with a stale topology can no longer store jobs there
-- (enqueue.lua refuses a closed partition).
--
-- KEYS[1]  scheduled zset, KEYS[2] ready zset, KEYS[3] leased zset,
-- KEYS[4]  retry_wait zset, KEYS[5] succeeded zset, KEYS[6] dead zset
-- KEYS[7]  fencing counter of the partition (deleted once closed, as is KEYS[3])
-- KEYS[8]  "closed" marker of the partition
-- ARGV[1]  how long the marker lives, in ms (longer than any topology cache)
--
-- Reads no job hash, so no record can make it fail halfway: it counts index
-- entries only (a damaged record counts where it is indexed; the quarantine
-- hash of the partition is kept, as the record of what was set aside).
--
-- Returns {closed (1/0), jobs held}.
local n = 0
-- below +inf: the leased zset's sentinel member (see lease.lua) is not a job
for i = 1, 6 do n = n + redis.call('ZCOUNT', KEYS[i], '-inf', '(+inf') end
if n > 0 then return {0, n} end
redis.call('SET', KEYS[8], '1', 'PX', ARGV[1])
redis.call('DEL', KEYS[3], KEYS[7])
return {1, 0}
