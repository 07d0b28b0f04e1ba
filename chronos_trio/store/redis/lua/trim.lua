-- trim.lua: delete finished jobs of ONE partition: retained succeeded jobs past
-- their retention, dead jobs older than a maximum age, the N oldest dead jobs,
-- and the M retained succeeded jobs whose retention ends first.
-- Work per call is capped so one call never blocks Redis for long; the client
-- calls again while 'more' is 1.
--
-- KEYS[1]  succeeded zset (score = end of retention)
-- KEYS[2]  dead zset (score = finished_at)
-- KEYS[3]  job key prefix: the job hash of ID x is KEYS[3]..x
-- KEYS[4]  quarantine hash of the partition: entries without a job hash
-- ARGV[1]  dead max age in seconds, or '' for no age limit
-- ARGV[2]  cap: at most this many entries looked at per kind (succeeded, old
--          dead) per call
-- ARGV[3]  additionally delete this many of the oldest dead jobs (0 = none)
-- ARGV[4]  additionally delete this many of the retained succeeded jobs whose
--          retention ends first (0 = none)
--
-- Every entry is judged before anything is written (see README.md). Only
-- a record whose state is that of its index is deleted (an aborted job is
-- kept, and trimmed, in the dead index): one whose state is
-- not is dead-lettered instead (out of the succeeded index; in the dead index
-- its state set right and its entry re-scored to now), an entry without a job
-- hash is quarantined, a record of a newer format is left untouched. Then the
-- partition's aborted marks (beside KEYS[3], see lib/aborted_key.lua)
-- older than the oldest dead entry left are dropped: their jobs are gone.
-- A workflow job whose end is still in the outbox keeps it there (see
-- lib/keep_flow_place.lua): the continuer handles it all the same.
--
-- Returns {deleted, more (1 when a cap was hit and something moved), dead
-- jobs left, retained succeeded jobs left, set aside (see README.md)}.
--@include clock
--@include dead_letter
--@include judge_entries
--@include keep_flow_place
--@include new_aside
--@include newer
--@include prune_aborted
--@include quarantine
--@include zrem_all
local now, now_s = clock()
local cap = tonumber(ARGV[2])
local aside = new_aside()
local deleted, more = 0, 0
-- judge the entries ids of zset (whose records should be in state: an
-- aborted one in the dead index is trimmed like a dead one) ...
local function judge(ids, state)
  return judge_entries(KEYS[3], ids, state, state == 'dead' and 'ok' or nil)
end
-- ... then apply: returns how many entries left the window (all but newer ones)
local function apply(zset, index, ids, plan, why)
  local taken, moved = {}, 0
  for k, id in ipairs(ids) do
    local p = plan[k]
    if p == 'ok' then
      local key = KEYS[3] .. id
      local g = redis.call('HMGET', key, 'state', 'x')
      if not keep_flow_place(KEYS[3], id, key, g[1], g[2]) then
        redis.call('DEL', key)
      end
      taken[#taken + 1] = id
      deleted = deleted + 1
    elseif p == 'gone' then
      quarantine(aside, KEYS[4], id, why[k], index, now)
      taken[#taken + 1] = id
    elseif p == 'bad' then
      if zset ~= KEYS[2] then taken[#taken + 1] = id end
      dead_letter(aside, KEYS[3] .. id, id, KEYS[2], why[k], now, now_s)
    else
      newer(aside, id, why[k])
      moved = moved - 1
    end
    moved = moved + 1
  end
  zrem_all(zset, taken)
  return moved
end
local batches = {}
if cap > 0 then
  batches[#batches + 1] = {KEYS[1], 'succeeded',
    redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, cap), true}
  if ARGV[1] ~= '' then
    local limit = now - tonumber(ARGV[1])
    batches[#batches + 1] = {KEYS[2], 'dead',
      redis.call('ZRANGE', KEYS[2], '-inf', limit, 'BYSCORE', 'LIMIT', 0, cap), true}
  end
end
local oldest = tonumber(ARGV[3])
if oldest > 0 then
  batches[#batches + 1] = {KEYS[2], 'dead', redis.call('ZRANGE', KEYS[2], 0, oldest - 1), false}
end
local first_done = tonumber(ARGV[4])
if first_done > 0 then
  batches[#batches + 1] = {KEYS[1], 'succeeded',
    redis.call('ZRANGE', KEYS[1], 0, first_done - 1), false}
end
-- judge every batch first (a dead entry may be in two batches: judged once)
local seen = {}
for _, b in ipairs(batches) do
  local ids = {}
  for _, id in ipairs(b[3]) do
    if not seen[id] then
      seen[id] = true
      ids[#ids + 1] = id
    end
  end
  b[5], b[6] = judge(ids, b[2])
  b[7] = #b[3] >= cap and b[4]
  b[3] = ids
end
for _, b in ipairs(batches) do
  local moved = apply(b[1], b[2], b[3], b[5], b[6])
  if b[7] and moved > 0 then more = 1 end
end
if #batches > 0 then prune_aborted(KEYS[3], KEYS[2]) end  -- marks of trimmed jobs
return {deleted, more, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[1]), aside}
