-- trigger_record.lua: step (a) of enqueue_trigger, fenced by the leader epoch.
-- Records FIRE_AT as the schedule's last fired time and the trigger's job as
-- "pending" until the client has enqueued it (steps (b) and (c) in
-- chronos_trio/store/redis/_leader.py). All keys share the leadership's tag;
-- the job's partition lives in another slot, hence the two steps.
--
-- KEYS[1]  leadership hash of NAME: holder, epoch, expires_at
-- KEYS[2]  last-fired hash of NAME: schedule id -> fire_at
-- KEYS[3]  pending-trigger hash of NAME: "schedule id@fire_at" -> encoded job
-- ARGV[1]  epoch the caller believes it leads with
-- ARGV[2]  schedule id
-- ARGV[3]  fire_at (epoch seconds)
-- ARGV[4]  pending field name
-- ARGV[5]  encoded job (JSON; never pickle)
--
-- Nothing read here can make it fail halfway: an unreadable expires_at (or a
-- leadership key that is not a hash) means the caller does not lead ('stale');
-- an unreadable last-fired time counts as never fired and is overwritten
-- (the trigger's job ID is deterministic, so a fire time enqueued before is
-- not enqueued twice while its job exists). A key of the wrong type among
-- KEYS[2], KEYS[3] fails the script before it writes anything.
--
-- Returns {status, pending field, value, ...}: status 'stale' (nothing done,
-- nothing else returned), 'already' or 'enqueued'; the pairs are every pending
-- trigger (including this one when enqueued), for the caller to enqueue.
--@include check_number
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local f = redis.pcall('HMGET', KEYS[1], 'holder', 'epoch', 'expires_at')
if f.err then return {'stale'} end
local until_ = not check_number('expires_at', f[3]) and tonumber(f[3])
if not f[1] or f[1] == '' or f[2] ~= ARGV[1] or not until_ or until_ <= now then
  return {'stale'}
end
local status = 'already'
local last = redis.call('HGET', KEYS[2], ARGV[2])
local pending = redis.call('HGETALL', KEYS[3])  -- read before any write: a wrong type fails here
local last_n = last and tonumber(last)
if not last_n or last_n ~= last_n or last_n == math.huge or last_n < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  status = 'enqueued'
end
local out = {status}
if status == 'enqueued' then pending = redis.call('HGETALL', KEYS[3]) end
for i = 1, #pending do out[#out + 1] = pending[i] end
return out
