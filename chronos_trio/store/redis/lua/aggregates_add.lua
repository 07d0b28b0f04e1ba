-- aggregates_add.lua: add a worker's counts to ONE queue's per-minute
-- aggregates, in the minute of the store's clock (records._aggregates).
--
-- KEYS[1]  the queue's aggregates prefix: the hash of minute m (epoch
--          seconds of its start) is KEYS[1]..m (one hash tag: one slot)
-- ARGV[1]  keep: seconds the minute's hash lives after the minute ends
-- then pairs: field, increment. A field is '<what>|<kind>', <what> one of
-- s (succeeded), f (failed), r (retried) or a run-time bucket's index
-- (0-based, records._aggregates.LATENCY_BOUNDS); only non-zero ones are sent.
--
-- The hash expires (EXPIREAT) keep seconds after its minute ends, so a
-- queue holds at most keep/60 + 1 minutes. Nothing here reads a key that
-- may hold another type but the minute's hash, which only this script
-- writes: a wrong type there fails this queue's additions only.
--
-- Returns the minute the counts went to.
--@include clock
local now = clock()
local minute = math.floor(now / 60) * 60
local key = KEYS[1] .. minute
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1])
end
redis.call('EXPIREAT', key, minute + 60 + math.ceil(tonumber(ARGV[1])))
return minute
