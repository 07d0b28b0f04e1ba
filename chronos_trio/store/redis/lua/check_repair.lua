-- check_repair.lua: the store checker's repair of ONE job of ONE partition,
-- applied only if the job is still exactly as check_inspect.lua read it (its
-- record fields and its place in every index), so a repair never acts on a job
-- that a worker moved meanwhile.
--
-- KEYS[1]     scheduled zset of the partition (score = run_at)
-- KEYS[2]     ready zset (score = run_at)
-- KEYS[3]     leased zset (score = lease expiry)
-- KEYS[4]     retry_wait zset (score = run_at)
-- KEYS[5]     succeeded zset (score = end of retention)
-- KEYS[6]     dead zset (score = finished_at); KEYS[1..6] are "the 6 indexes" below
-- KEYS[7]     quarantine hash of the partition (job id -> reason and time)
-- KEYS[8]     job key prefix: the job hash of ID x is KEYS[8]..x
-- ARGV[1]     job id
-- ARGV[2]     action:
--             'reindex'  put the job in index ARGV[3] (1..6) with score ARGV[4] ('' for
--                        the other actions),
--                        and out of every other index
--             'dead'     dead-letter it: state dead, last_error ARGV[3],
--                        finished_at now, lease fields cleared, in the dead index
--                        only, its unique key released (unique_finished)
--             'orphan'   its record is gone: remove it from every index and record
--                        HSET KEYS[7] id {"reason": ARGV[3], "at": now} (JSON)
--             'recover'  its lease expired more than ARGV[3] seconds ago: back to
--                        ready (due now), or dead once max_retries + 1 attempts
--                        were used, or aborted when an abort was asked for it
--                        (field ab), exactly as recover.lua does
-- ARGV[5]     the record existed when inspected ('1') or not ('0')
-- ARGV[6..5+INSPECTED] the INSPECTED values as inspected (inspect_fields in
--             lib/inspect_fields.lua), each '' when absent, else '=' .. value
-- ARGV[6+INSPECTED..11+INSPECTED] its score in each of the 6 indexes as
--             inspected ('' when not there)
--
-- Returns {'skipped'} when the job changed since it was inspected (nothing
-- done), else {action, detail}: detail is the index (reindex), the last_error
-- written (dead, and recover when it dead-lettered: action 'dead'; recover
-- when it aborted the job: action 'aborted'), or ''.
--@include abort_job
--@include clock
--@include inspect_fields
--@include ready_score
--@include unique_finished
local id = ARGV[1]
local key = KEYS[8] .. id
-- a key of another type is no record, as check_inspect.lua reads it (never HMGET it)
local exists = redis.call('TYPE', key).ok == 'hash' and '1' or '0'
if exists ~= ARGV[5] then return {'skipped'} end
local f = {}
if exists == '1' then
  f = inspect_fields(key)
end
for k = 1, INSPECTED do
  local want = ARGV[5 + k]
  if f[k] then
    if want ~= '=' .. f[k] then return {'skipped'} end
  elseif want ~= '' then
    return {'skipped'}
  end
end
for z = 1, 6 do
  local score = redis.call('ZSCORE', KEYS[z], id)
  if (score or '') ~= ARGV[5 + INSPECTED + z] then return {'skipped'} end
end
local now, now_s = clock()
local action = ARGV[2]
local function leave_all_but(keep)
  for z = 1, 6 do
    if z ~= keep and ARGV[5 + INSPECTED + z] ~= '' then redis.call('ZREM', KEYS[z], id) end
  end
end
local function dead_letter(reason)
  leave_all_but(6)
  redis.call('HSET', key, 'state', 'dead', 'last_error', reason, 'finished_at', now_s,
    'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  redis.call('ZADD', KEYS[6], now, id)
  -- dead, it gives its unique key back, as every dead job does
  unique_finished(KEYS[8], id, redis.call('HGET', key, 'x'), false)
  return {'dead', reason}
end
if action == 'reindex' then
  local target = tonumber(ARGV[3])
  leave_all_but(target)
  local score = ARGV[4]
  if target == 2 then score = ready_score(score, redis.call('HGET', key, 'fc')) end
  redis.call('ZADD', KEYS[target], score, id)
  return {'reindex', ARGV[3]}
elseif action == 'dead' then
  return dead_letter(ARGV[3])
elseif action == 'orphan' then
  leave_all_but(0)
  redis.call('HSET', KEYS[7], id, cjson.encode({reason = ARGV[3], at = now}))
  return {'orphan', ''}
elseif action == 'recover' then
  -- the inspected record was sound: these fields are numbers
  if tonumber(f[10]) + tonumber(ARGV[3]) > now then return {'skipped'} end
  local ab = redis.call('HGET', key, 'ab')
  if ab then
    leave_all_but(6)
    local u = redis.call('HMGET', key, 'x', 'w')
    abort_job(KEYS[8], key, id, KEYS[6], ab, now, now_s, u[1], u[2])
    return {'aborted', ab}
  end
  local attempts, max_retries = tonumber(f[5]), tonumber(f[6])
  if attempts > max_retries then
    return dead_letter('lease expired on attempt ' .. attempts .. ' of ' .. (max_retries + 1)
      .. ' (worker lost); retries exhausted')
  end
  leave_all_but(2)
  redis.call('HSET', key, 'state', 'ready', 'run_at', now_s,
    'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  redis.call('ZADD', KEYS[2], ready_score(now, redis.call('HGET', key, 'fc')), id)
  return {'recover', ''}
end
return redis.error_reply('check_repair.lua: unknown action ' .. tostring(action))
