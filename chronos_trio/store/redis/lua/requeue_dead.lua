-- requeue_dead.lua: make the ARGV[1] oldest dead jobs of ONE partition ready
-- again, with attempts reset.
--
-- KEYS[1]  dead zset (score = finished_at)
-- KEYS[2]  ready zset (score = run_at)
-- KEYS[3]  job key prefix: the job hash of ID x is KEYS[3]..x
-- KEYS[4]  quarantine hash of the partition: dead entries without a job hash
-- ARGV[1]  how many dead entries to look at (> 0)
--
-- Every entry is judged before anything is written (see _prelude.lua): a
-- record whose state is not 'dead' is dead-lettered again (its state set
-- right, its entry re-scored to now) instead of requeued, an entry without a
-- job hash is quarantined, a record of a newer format stays dead, untouched.
--
-- Returns {moved, looked at, set aside (see _prelude.lua)}. The client calls
-- again while a full ARGV[1] was looked at and something other than newer
-- records was among them.
local aside = new_aside()
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return {0, 0, aside} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
local plan, why = {}, {}
for k, id in ipairs(ids) do
  local f, none = read_job(KEYS[3] .. id, 'v', 'state')
  if not f then
    plan[k], why[k] = 'gone', none
  else
    local bad = check_format(f[1])
    if bad == 'newer' then
      plan[k], why[k] = 'newer', f[1]
    else
      bad = bad or check_state(f[2], 'dead', 'dead')
      plan[k], why[k] = bad and 'bad' or 'ok', bad
    end
  end
end
-- every record is judged: now write
local moved, taken = 0, {}
for k, id in ipairs(ids) do
  local p = plan[k]
  if p == 'ok' then
    redis.call('HSET', KEYS[3] .. id, 'state', 'ready', 'run_at', now_s, 'attempts', 0,
      'finished_at', '')
    redis.call('ZADD', KEYS[2], ready_score(now, redis.call('HGET', KEYS[3] .. id, 'fc')), id)
    taken[#taken + 1] = id
    moved = moved + 1
  elseif p == 'gone' then
    quarantine(aside, KEYS[4], id, why[k], 'dead', now)
    taken[#taken + 1] = id
  elseif p == 'bad' then
    dead_letter(aside, KEYS[3] .. id, id, KEYS[1], why[k], now, now_s)
  else
    newer(aside, id, why[k])
  end
end
zrem_all(KEYS[1], taken)
return {moved, #ids, aside}
