-- enqueue_plain.lua: store ONE plain job, due now, and wake the queue's idle
-- leasers, on a single node (or a Sentinel's master): the one-at-a-time
-- producer's usual call (store/redis/_enqueue_one.py), cheaper for Redis
-- than enqueue.lua and its separate wake-up.
--
-- A plain job has no unique key, no flow control (no priority, limits or
-- expiry), no workflow continuation and no delay or given due time: what
-- enqueue.lua stores for it is only its record (lib/write_record.lua) and
-- its ready zset entry scored by its due time, now. This script stores
-- exactly that, the same fields in the same order (the tests compare the
-- two), so every worker, old or new, reads it as it reads enqueue.lua's.
-- Any other job takes enqueue.lua; so does a Cluster, whose wake-up stream
-- is in another slot than the partition (KEYS[4] is not of this slot).
--
-- KEYS[1]  ready zset of the partition (score = run_at)
-- KEYS[2]  "closed" marker of the partition (set once its version was completed)
-- KEYS[3]  job key prefix of the partition ('<tag>:j:'): the job hash of ID x
--          is KEYS[3]..x
-- KEYS[4]  the queue's ready wake-up stream (keys.py's wake_ready)
-- ARGV     one job's first 8 entries of enqueue.lua's ARGV, in their
--          layout (so lib/write_record.lua reads them, at offset 1):
-- ARGV[1]  id
-- ARGV[2]  kind
-- ARGV[3]  payload (raw bytes)
-- ARGV[4]  run_at, ignored (the job is due now: '' will do)
-- ARGV[5]  delay, ignored (as run_at)
-- ARGV[6]  max_retries
-- ARGV[7]  timeout
-- ARGV[8]  headers (a JSON object, stored as field h; '' for none: no field)
--
-- The wake-up is enqueue.lua's caller's (_core.py's wake_one_ops): an entry
-- n = 1 on the stream, which keeps about its newest WAKE_KEEP (trimmed
-- approximately, a whole node at a time: exact trimming walks the
-- stream's node on every entry, several times this script's own cost). It
-- follows the job's record and zset entry, in this same step, so a waiter
-- that wakes finds the job. A damaged stream (a key of another type) costs
-- the wake-up only, as a failed wake-up command after enqueue.lua does.
--
-- Returns now (a string: the job's due time) when the job was stored;
-- {'closed'} when the partition was closed (the client re-reads the
-- topology and routes the job again); {now, 0, run_at, id} as enqueue.lua
-- does for one job when the ID exists, which is then left untouched (and
-- nobody is woken), run_at the existing record's field as it is ('' when
-- unreadable; the client judges the number). The usual reply is a string,
-- not enqueue.lua's table of four: a table costs Redis about 6k
-- instructions more to make and send.
--@include wake_keep
--@include write_record
local key = KEYS[3] .. ARGV[1]
local fresh = redis.call('EXISTS', KEYS[2], key) == 0
if not fresh and redis.call('EXISTS', KEYS[2]) == 1 then
  return {'closed'}
end
local t = redis.call('TIME')
local now_s = string.format('%.17g', tonumber(t[1]) + tonumber(t[2]) / 1000000)
if not fresh then
  -- EXISTS, not HGET run_at: a damaged record (or a key of another type)
  -- exists too, and is never touched
  local existing = redis.pcall('HGET', key, 'run_at')
  if type(existing) ~= 'string' then existing = '' end
  return {now_s, 0, existing, ARGV[1]}
end
write_record(key, 1, now_s, 'ready', now_s)
redis.call('ZADD', KEYS[1], now_s, ARGV[1])
redis.pcall('XADD', KEYS[4], 'MAXLEN', '~', WAKE_KEEP, '*', 'n', 1)
return now_s
