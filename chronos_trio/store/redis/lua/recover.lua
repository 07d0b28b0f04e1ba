-- recover.lua: take back up to ARGV[1] expired leases of ONE partition, earliest
-- expiry first: back to ready (the unclaimed stamp uc cleared), or dead once
-- max_retries + 1 attempts were used (a job that keeps killing its worker must
-- not loop forever), or aborted
-- when an abort was asked for it (field ab, see abort.lua): its worker died
-- before it could settle it.
--
-- KEYS[1]  leased zset (score = lease expiry)
-- KEYS[2]  ready zset (score = run_at)
-- KEYS[3]  dead zset (score = finished_at)
-- KEYS[4]  job key prefix: the job hash of ID x is KEYS[4]..x
-- KEYS[5]  quarantine hash of the partition: leased entries without a job hash
-- ARGV[1]  limit (> 0)
--
-- Every expired entry is judged before anything is written (see
-- README.md): a record whose attempts or max_retries is not a count, or
-- whose state, run_at, lease_token or lease_expires_at (the fields recovery
-- overwrites) is not what every path judges it must be, is dead-lettered, an
-- entry without a job hash is quarantined, a record of a newer format keeps
-- its lease entry, untouched. (The state need not be leased: the leased index
-- decides.)
--
-- A key of the wrong type among KEYS fails the script before it writes anything.
--
-- Returns {now, {requeued ids...}, {dead jobs: per job the id then the 13
-- fields kind, payload, run_at, state, attempts, max_retries, timeout,
-- lease_token, lease_owner, lease_expires_at, last_error, created_at,
-- finished_at, then the 7 v, result, result_until, h, x, fc, uc (nil when
-- absent): the whole job, as the client reads one}, set aside (see
-- README.md), {aborted jobs: as the dead ones}}.
--
-- Each lease taken back (but a damaged record's) adds its attempt to the
-- job's attempt history (field ah, see lib/add_attempt.lua) in this same
-- step: outcome 'expired' ('aborted' when an abort was asked), its start
-- not known.
--@include abort_job
--@include add_attempt
--@include check_count
--@include check_format
--@include check_job_state
--@include check_number
--@include check_text
--@include clock
--@include dead_letter
--@include fails
--@include format
--@include job_fields
--@include lease_expired
--@include new_aside
--@include newer
--@include notify_done
--@include outbox_key
--@include probe_job
--@include quarantine
--@include ready_score
--@include unique_finished
--@include wrong_type
--@include zrem_all
-- Append the job at key to into, as the reply gives it: the 13 JOB_FIELDS
-- ('' when absent), then the fields a client reads besides them.
local REST_FIELDS = {'v', 'result', 'result_until', 'h', 'x', 'fc', 'uc'}
local function whole_job(into, key)
  local g = job_fields(key)
  for j = 1, 13 do into[#into + 1] = g[j] or '' end
  local r = redis.call('HMGET', key, unpack(REST_FIELDS))
  for j = 1, #REST_FIELDS do into[#into + 1] = r[j] end
end

local now, now_s = clock()
local aside = new_aside()
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[1])
local requeued, dead, aborted = {}, {}, {}
if #expired == 0 then return {now_s, requeued, dead, aside, aborted} end
local bad_key = wrong_type(KEYS[2], 'zset', KEYS[3], 'zset', KEYS[5], 'hash')
if bad_key then return redis.error_reply(bad_key) end
local plan, why, taken = {}, {}, {}
for k, id in ipairs(expired) do
  local key = KEYS[4] .. id
  local f = redis.pcall('HMGET', key, 'v', 'attempts', 'max_retries', 'ab', 'state', 'run_at',
    'lease_token', 'lease_expires_at')
  local none = nil
  if not f[2] then f, none = probe_job(key, f, 8) end
  if not f then
    plan[k], why[k] = 'gone', none
  else
    local v, bad = f[1], nil
    if v and v ~= FORMAT_S then bad = check_format(v) end
    if bad == 'newer' then
      plan[k], why[k] = 'newer', v
    elseif not bad and f[4] then
      plan[k], why[k] = 'abort', f[4]  -- an abort needs nothing else of the record
    else
      -- what recovery reads (attempts, max_retries) and what it overwrites
      -- (state, run_at, the lease): judged as every path judges them
      -- (store/_record_rules.py), so it never rewrites a damaged value into a
      -- sound one; the fields it leaves are judged by the next lease
      bad = bad or check_count('attempts', f[2]) or check_count('max_retries', f[3])
        or check_job_state(f[5]) or check_number('run_at', f[6])
        or check_text('lease_token', f[7]) or check_number('lease_expires_at', f[8])
      local attempts, max_retries = tonumber(f[2]), tonumber(f[3])
      if bad then
        plan[k], why[k] = 'bad', bad
      elseif attempts > max_retries then
        plan[k], why[k] = 'dead', attempts .. ' of ' .. (max_retries + 1)
      else
        plan[k] = 'ready'
      end
    end
  end
end
-- every record is judged: now write
for k, id in ipairs(expired) do
  local key = KEYS[4] .. id
  local p = plan[k]
  if p == 'newer' then
    newer(aside, id, why[k])
  else
    taken[#taken + 1] = id
    if p == 'gone' then
      quarantine(aside, KEYS[5], id, why[k], 'leased', now)
    elseif p == 'bad' then
      dead_letter(aside, key, id, KEYS[3], why[k], now, now_s)
    elseif p == 'dead' then
      local err = 'lease expired on attempt ' .. why[k] .. ' (worker lost); retries exhausted'
      add_attempt(key, 'expired', redis.call('HGET', key, 'attempts'), '', now_s, err)
      redis.call('HSET', key, 'state', 'dead', 'finished_at', now_s, 'last_error', err,
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      redis.call('ZADD', KEYS[3], now, id)
      local x = redis.call('HGET', key, 'x')
      unique_finished(KEYS[4], id, x, false)
      if fails(x) then
        -- a workflow job with failure handling: to the outbox in this same step
        redis.call('ZADD', outbox_key(KEYS[4]), now, id)
      end
      dead[#dead + 1] = id
      whole_job(dead, key)
      notify_done(key, redis.call('HGET', key, 'w'))
    elseif p == 'abort' then
      local u = redis.call('HMGET', key, 'x', 'w')
      add_attempt(key, 'aborted', redis.call('HGET', key, 'attempts'), '', now_s, why[k])
      abort_job(KEYS[4], key, id, KEYS[3], why[k], now, now_s, u[1], u[2])
      aborted[#aborted + 1] = id
      whole_job(aborted, key)
    else
      add_attempt(key, 'expired', redis.call('HGET', key, 'attempts'), '', now_s, LEASE_EXPIRED)
      redis.call('HSET', key, 'state', 'ready', 'run_at', now_s,
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      redis.call('HDEL', key, 'uc')  -- its worker may have had the handler (see settle.lua)
      redis.call('ZADD', KEYS[2], ready_score(now, redis.call('HGET', key, 'fc')), id)
      requeued[#requeued + 1] = id
    end
  end
end
zrem_all(KEYS[1], taken)
return {now_s, requeued, dead, aside, aborted}
