--@include discarded_prefix
--@include outbox_key
--@include workflow_keep
-- In the settle that discards job id (its hash key, extras x and attempts
-- as read, error the failure it was discarded for), when x holds failure
-- handling: its step ends failed in its flow, in the same step, as a deleted
-- job's does (lib/keep_flow_place.lua): the partition's gone key of the job
-- (<tag>:gone:<id>, kept WORKFLOW_KEEP seconds) gets the entry the
-- continuer reads (dead, error DISCARDED_PREFIX .. error), and the job goes
-- to the outbox. A job hash kept for its result waiters loses its
-- continuation, so outbox_read.lua reads the gone key instead.
local function keep_discarded_place(prefix, key, id, x, attempts, error, now)
  local place = string.sub(prefix, 1, -3) .. 'gone:' .. id
  redis.call('HSET', place, 'x', x, 'state', 'dead', 'last_error', DISCARDED_PREFIX .. error,
    'attempts', attempts, 'kind', redis.call('HGET', key, 'kind') or '')
  redis.call('EXPIRE', place, WORKFLOW_KEEP)
  redis.call('HDEL', key, 'x')
  redis.call('ZADD', outbox_key(prefix), now, id)
end
