-- purge.lua: delete up to ARGV[1] jobs of ONE partition that are not leased
-- (AdminRole.purge_queue), index by index, each as delete.lua deletes one.
--
-- KEYS[1]  scheduled zset, KEYS[2] ready zset, KEYS[3] retry_wait zset,
-- KEYS[4]  succeeded zset (retained ones), KEYS[5] dead zset (dead and aborted)
-- KEYS[6]  job key prefix: the job hash of ID x is KEYS[6]..x
-- KEYS[7]  quarantine hash of the partition: entries without a job hash
-- KEYS[8]  the partition's aborted marks (see lib/aborted_key.lua)
-- ARGV[1]  how many jobs to delete at most (> 0; also bounds the entries
--          looked at, so one call never blocks Redis for long)
-- ARGV[2..6]  per index (KEYS[1..5]), how many of its first entries to pass
--          over: those an earlier call of the same purge left in place
--
-- Each window of an index is judged before anything is written for it (see
-- README.md): an entry without a job hash is quarantined and leaves the
-- index; a record of a newer format, and one whose state says leased (a
-- worker holds it: it is not this index's to delete), stay where they are,
-- untouched; every other record is deleted whole: out of its index (and
-- its aborted mark), its unique key released as a finished job's, the hash
-- (notes and history are fields of it) deleted, its result waiters woken.
-- The leased index is never read: leased jobs are left to finish. A
-- workflow job keeps its place in its flow (see lib/keep_flow_place.lua).
--
-- Returns {deleted, more (1 when it stopped at ARGV[1]: call again), kept_1,
-- ..., kept_5 (entries left in place per index: the next call passes over
-- ARGV[k + 1] + kept_k), set aside (see README.md)}.
--@include clock
--@include keep_flow_place
--@include new_aside
--@include newer
--@include notify_done
--@include quarantine
--@include read_job
--@include check_format
--@include unique_finished
--@include zrem_all
local aside = new_aside()
local want = tonumber(ARGV[1])
local deleted, looked = 0, 0
local kept = {0, 0, 0, 0, 0}
local names = {'scheduled', 'ready', 'retry_wait', 'succeeded', 'dead'}
local now
for i = 1, 5 do
  local skip = tonumber(ARGV[i + 1])
  while looked < want do
    local ids = redis.call('ZRANGE', KEYS[i], skip + kept[i], skip + kept[i] + want - looked - 1)
    if #ids == 0 then break end
    looked = looked + #ids
    -- judge the window ...
    local plan, why = {}, {}
    for k, id in ipairs(ids) do
      local f, none = read_job(KEYS[6] .. id, 'v', 'state', 'w', 'x')
      if not f then
        plan[k], why[k] = 'gone', none
      elseif check_format(f[1]) == 'newer' then
        plan[k], why[k] = 'newer', f[1]
      elseif f[2] == 'leased' then
        plan[k] = 'keep'
      else
        plan[k], why[k] = 'ok', f
      end
    end
    -- ... then write
    local taken = {}
    for k, id in ipairs(ids) do
      local p = plan[k]
      if p == 'ok' then
        local key = KEYS[6] .. id
        unique_finished(KEYS[6], id, why[k][4], false)  -- its unique key is free
        if not keep_flow_place(KEYS[6], id, key, why[k][2], why[k][4]) then
          redis.call('DEL', key)
        end
        notify_done(key, why[k][3])
        taken[#taken + 1] = id
        deleted = deleted + 1
      elseif p == 'gone' then
        if not now then now = clock() end
        quarantine(aside, KEYS[7], id, why[k], names[i], now)
        taken[#taken + 1] = id
      else
        if p == 'newer' then newer(aside, id, why[k]) end
        kept[i] = kept[i] + 1
      end
    end
    zrem_all(KEYS[i], taken)
    if i == 5 then zrem_all(KEYS[8], taken) end
  end
end
return {deleted, looked >= want and 1 or 0, kept[1], kept[2], kept[3], kept[4], kept[5], aside}
