-- run_now.lua: make one scheduled, retry_wait or dead job ready at once (a dead
-- job gets its attempts reset).
--
-- KEYS[1]  scheduled zset, KEYS[2] retry_wait zset, KEYS[3] dead zset,
-- KEYS[4]  ready zset (score = run_at)
-- KEYS[5]  job key prefix: the job hash of ID x is KEYS[5]..x
-- KEYS[6]  leased zset, KEYS[7] succeeded zset (only to take a record whose
--          state is unreadable out of every index)
-- ARGV[1]  job id
--
-- The record is judged before anything is written (see README.md). One
-- whose state is missing or unknown cannot be run (where it is indexed is
-- unknown): it is dead-lettered and taken out of every other index. One of a
-- newer format is left untouched.
--
-- Returns {code, set aside (see README.md)}: code 1 moved; 0 absent (or
-- its key is not a job hash), in another state or discarded; 2 dead-lettered as
-- damaged; 3 left alone (newer format).
--@include check_job_state
--@include clock
--@include dead_letter
--@include new_aside
--@include read_one
--@include ready_score
local aside = new_aside()
local key = KEYS[5] .. ARGV[1]
local f, bad, code = read_one(aside, key, ARGV[1])
if not f then return {code, aside} end
local state = f[2]
local from = nil  -- the index it leaves
if not bad then
  from = ({scheduled = KEYS[1], retry_wait = KEYS[2], dead = KEYS[3]})[state]
  -- a dead record that expires by itself was discarded (kept for its
  -- waiters only, in no index): it cannot be run
  if state == 'dead' and redis.call('PTTL', key) > 0 then return {0, aside} end
  if not from then
    bad = check_job_state(state)
    if not bad then return {0, aside} end  -- ready, leased, succeeded or aborted
  end
end
local now, now_s = clock()
if bad then
  for _, z in ipairs({KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}) do
    redis.call('ZREM', z, ARGV[1])
  end
  dead_letter(aside, key, ARGV[1], KEYS[3], bad, now, now_s)
  return {2, aside}
end
redis.call('ZREM', from, ARGV[1])
redis.call('HSET', key, 'state', 'ready', 'run_at', now_s, 'finished_at', '')
if state == 'dead' then redis.call('HSET', key, 'attempts', 0) end
redis.call('ZADD', KEYS[4], ready_score(now, redis.call('HGET', key, 'fc')), ARGV[1])
return {1, aside}
