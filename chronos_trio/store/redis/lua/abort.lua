-- abort.lua: abort one job of ONE partition.
--
-- KEYS[1]  scheduled zset, KEYS[2] ready zset, KEYS[3] leased zset,
-- KEYS[4]  retry_wait zset, KEYS[5] succeeded zset, KEYS[6] dead zset
-- KEYS[7]  job key prefix: the job hash of ID x is KEYS[7]..x (the
--          partition's aborted marks, see lib/aborted_key.lua, sit
--          beside it in the same slot)
-- ARGV[1]  job id
-- ARGV[2]  the last_error an aborted job keeps ("aborted", and the reason
--          given: made in Python, records.abort_error)
--
-- A scheduled, ready or retry_wait job is aborted at once (abort_job: out of
-- its index, into the dead index and the aborted marks, state aborted, its
-- unique key released, its waiters woken). A leased job keeps its lease and
-- gets field ab = ARGV[2] (unless an earlier abort set it): renew.lua reports it to the lease holder with every
-- renewal, settle.lua makes the job aborted when that worker settles it (and
-- when it retries or releases it), recover.lua when its lease expires first.
-- A finished job (succeeded, dead, aborted) is left alone.
--
-- The record is judged before anything is written (see README.md). One
-- whose state is missing or unknown (where it is indexed is unknown) is
-- dead-lettered and taken out of every other index, as run_now.lua does. One
-- of a newer format is left untouched; a key that is not a job hash is no job.
--
-- Returns {code, set aside (see README.md)}: code 1 aborted, 2 flagged
-- (leased), 0 absent, -1 finished already, 3 left alone (newer format),
-- 4 dead-lettered as damaged.
--@include abort_job
--@include check_job_state
--@include clock
--@include dead_letter
--@include new_aside
--@include read_one
--@include wrong_type
local aside = new_aside()
local id = ARGV[1]
local key = KEYS[7] .. id
local f, bad, code = read_one(aside, key, id, 'x', 'w')
if not f then return {code, aside} end
local state = f[2]
local from = nil  -- the index it leaves
if not bad then
  from = ({scheduled = KEYS[1], ready = KEYS[2], retry_wait = KEYS[4]})[state]
  if state == 'leased' then
    redis.call('HSETNX', key, 'ab', ARGV[2])  -- the first abort's reason stands
    return {2, aside}
  elseif not from then
    bad = check_job_state(state)
    if not bad then return {-1, aside} end  -- succeeded, dead or aborted
  end
end
local now, now_s = clock()
if bad then
  for z = 1, 5 do redis.call('ZREM', KEYS[z], id) end
  dead_letter(aside, key, id, KEYS[6], bad, now, now_s)
  return {4, aside}
end
local wrong = wrong_type(from, 'zset', KEYS[6], 'zset')
if wrong then return redis.error_reply(wrong) end
redis.call('ZREM', from, id)
abort_job(KEYS[7], key, id, KEYS[6], ARGV[2], now, now_s, f[3], f[4])
return {1, aside}
