-- requeue_dead.lua: make up to ARGV[1] of the oldest dead jobs of ONE partition
-- ready again, with attempts reset (and the unclaimed stamp uc cleared), looking at
-- at most ARGV[2] dead entries.
--
-- KEYS[1]  dead zset (score = finished_at)
-- KEYS[2]  ready zset (score = run_at)
-- KEYS[3]  job key prefix: the job hash of ID x is KEYS[3]..x
-- KEYS[4]  quarantine hash of the partition: dead entries without a job hash
-- ARGV[1]  how many jobs to requeue (> 0)
-- ARGV[2]  how many dead entries to look at, at most (so one call never blocks
--          Redis for long)
-- ARGV[3]  how many of the oldest entries to pass over: those an earlier call
--          of the same requeue left in place (0 at first)
--
-- The dead index is walked oldest first, a window at a time, and every entry
-- of a window is judged before anything is written for it (see README.md):
-- a record whose state is neither 'dead' nor 'aborted' is dead-lettered again
-- (its state set right, its entry re-scored to now) instead of requeued, an
-- entry without a job hash is quarantined, an aborted job (kept in the dead
-- index, never requeued) and a record of a newer format stay where they are,
-- untouched; the walk goes on past them.
--
-- Returns {moved, more (1 when it stopped at ARGV[1] moved or ARGV[2] looked
-- at: the client may call again), kept (the entries it left in place: the
-- next call passes over ARGV[3] + kept), set aside (see README.md)}.
--@include clock
--@include dead_letter
--@include judge_entries
--@include new_aside
--@include newer
--@include quarantine
--@include ready_score
--@include zrem_all
local aside = new_aside()
local want, cap, skip = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local moved, looked, kept = 0, 0, skip  -- kept: entries left in place, at the front
local now, now_s
while moved < want and looked < cap do
  local n = math.min(want - moved, cap - looked)
  local ids = redis.call('ZRANGE', KEYS[1], kept, kept + n - 1)
  if #ids == 0 then return {moved, 0, kept - skip, aside} end
  if not now then
    now, now_s = clock()
  end
  -- an aborted job stays (plan 'keep')
  local plan, why = judge_entries(KEYS[3], ids, 'dead', 'keep')
  -- every record of the window is judged: now write
  local taken = {}
  for k, id in ipairs(ids) do
    local p = plan[k]
    if p == 'ok' then
      redis.call('HSET', KEYS[3] .. id, 'state', 'ready', 'run_at', now_s, 'attempts', 0,
        'finished_at', '')
      redis.call('HDEL', KEYS[3] .. id, 'uc')  -- a fresh start (see settle.lua)
      redis.call('ZADD', KEYS[2], ready_score(now, redis.call('HGET', KEYS[3] .. id, 'fc')), id)
      taken[#taken + 1] = id
      moved = moved + 1
    elseif p == 'gone' then
      quarantine(aside, KEYS[4], id, why[k], 'dead', now)
      taken[#taken + 1] = id
    elseif p == 'bad' then
      dead_letter(aside, KEYS[3] .. id, id, KEYS[1], why[k], now, now_s)
    elseif p == 'newer' then
      newer(aside, id, why[k])
      kept = kept + 1
    else
      kept = kept + 1
    end
  end
  zrem_all(KEYS[1], taken)
  looked = looked + #ids
  if #ids < n then return {moved, 0, kept - skip, aside} end
end
return {moved, 1, kept - skip, aside}
