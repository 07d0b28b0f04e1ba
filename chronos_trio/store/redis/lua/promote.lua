-- promote.lua: move up to ARGV[1] due jobs of the partitions in KEYS (one or
-- more, of one or more queues) from scheduled and retry_wait to ready,
-- earliest due first (within a partition ties go by job ID, as in the zsets).
-- The partitions come in groups (queues), ARGV[2] onwards; the limit goes to
-- the first group's due jobs, in one order by due time across its partitions
-- (see lib/earliest.lua), what is left of it to the next group, and
-- so on. On a single node one call promotes every queue; on
-- a Cluster, whose scripts touch one slot, the client calls it per partition
-- with that partition's share.
--
-- KEYS[1+6i .. 6+6i], per partition i = 0, 1, ... (partition p = i + 1 below):
--   KEYS[1+6i]  scheduled zset (score = run_at)
--   KEYS[2+6i]  retry_wait zset (score = run_at)
--   KEYS[3+6i]  ready zset (score = run_at, moved by priority: lib/ready_score.lua)
--   KEYS[4+6i]  job key prefix: the job hash of ID x is KEYS[4+6i]..x
--   KEYS[5+6i]  dead zset (score = finished_at): where damaged records go
--   KEYS[6+6i]  quarantine hash of the partition: entries without a job hash
-- ARGV[1]  limit (> 0): due entries looked at, promoted or set aside
-- ARGV[2+g], per group g = 0, 1, ...: how many partitions (in KEYS order) it has
--
-- Each due entry is judged before anything is written for it (nothing in a
-- judgement can fail; see README.md): a record whose state is not the one of
-- its index is dead-lettered, an entry without a job hash is quarantined, a
-- record of a newer format stays where it is, untouched (and does not count as
-- waiting in next_due).
--
-- A key of the wrong type among a partition's keys fails that partition
-- before anything is written in it; the others are promoted as usual.
--
-- Returns {now, then per partition p in KEYS order: the reason (a string)
-- when it failed, else {promoted, next_due ('' when nothing waits), set aside
-- (see README.md)}}. next_due is the earliest due time of a job this
-- version can still promote; when the limit cut the due entries short it is
-- the earliest left, so the caller comes back at once.
--@include check_format
--@include check_state
--@include clock
--@include dead_letter
--@include earliest
--@include format
--@include new_aside
--@include newer
--@include probe_job
--@include quarantine
--@include rank_score
--@include ready_score
--@include wrong_type
--@include zrem_all
local now, now_s = clock()

-- Promote up to limit due entries of partition p (0: none; only its next_due).
-- Returns its part of the reply and how many due entries it looked at.
local function promote_partition(p, limit)
  local b = 6 * (p - 1)
  local sched, retry, ready, prefix = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4]
  local dead, damaged = KEYS[b + 5], KEYS[b + 6]
  local aside = new_aside()
  local s, r = {}, {}
  if limit > 0 then
    s = redis.call('ZRANGE', sched, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
    r = redis.call('ZRANGE', retry, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  end
  if #s > 0 or #r > 0 then
    local bad_key = wrong_type(ready, 'zset', dead, 'zset', damaged, 'hash')
    if bad_key then error(bad_key, 0) end
  end
  -- merge the two due lists by (score, id), judging each record, then writing it
  local i, j, n, promoted = 1, 1, 0, 0
  local scored = {}
  local taken = {{}, {}}
  while n < limit and (i <= #s or j <= #r) do
    local take_s
    if i > #s then
      take_s = false
    elseif j > #r then
      take_s = true
    else
      local x, y = tonumber(s[i + 1]), tonumber(r[j + 1])
      take_s = x < y or (x == y and s[i] < r[j])
    end
    local id, score, from, state
    if take_s then
      id, score, from, state = s[i], s[i + 1], 1, 'scheduled'
      i = i + 2
    else
      id, score, from, state = r[j], r[j + 1], 2, 'retry_wait'
      j = j + 2
    end
    n = n + 1
    local key = prefix .. id
    local f = redis.pcall('HMGET', key, 'v', 'state', 'fc')
    local none = nil
    if not f[2] then f, none = probe_job(key, f, 3) end
    local index = from == 1 and 'scheduled' or 'retry'
    local v, bad = f and f[1], nil
    if v and v ~= FORMAT_S then bad = check_format(v) end
    if bad == 'newer' then
      newer(aside, id, v)  -- stays where it is
    else
      local tk = taken[from]
      tk[#tk + 1] = id
      if not f then
        quarantine(aside, damaged, id, none, index, now)
      elseif bad or f[2] ~= state then
        dead_letter(aside, key, id, dead, bad or check_state(f[2], state, index), now, now_s)
      else
        redis.call('HSET', key, 'state', 'ready')
        -- a job with a priority goes ahead of (or behind) its due order
        scored[#scored + 1] = f[3] and ready_score(score, f[3]) or score
        scored[#scored + 1] = id
        promoted = promoted + 1
      end
    end
  end
  for c = 1, #scored, 1000 do
    redis.call('ZADD', ready, unpack(scored, c, math.min(c + 999, #scored)))
  end
  zrem_all(sched, taken[1])
  zrem_all(retry, taken[2])
  -- Every due entry was looked at unless a due list filled the limit or the
  -- merge stopped at it (or there was no limit): then what is left may be
  -- due and the caller comes back at once. Otherwise only entries of a newer
  -- format are left due, and the next due time is the first one after now.
  local complete = limit > 0 and i > #s and j > #r and #s < 2 * limit and #r < 2 * limit
  local lo = complete and ('(' .. now_s) or '-inf'
  local next_due = nil
  local hs = redis.call('ZRANGE', sched, lo, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  local hr = redis.call('ZRANGE', retry, lo, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if hs[2] then next_due = tonumber(hs[2]) end
  if hr[2] and (next_due == nil or tonumber(hr[2]) < next_due) then next_due = tonumber(hr[2]) end
  local nd = ''
  if next_due then nd = string.format('%.17g', next_due) end
  return {promoted, nd, aside}, n
end

-- The due entries of source k of a group starting after partition p0 (its
-- partition's scheduled zset for k odd, retry_wait for k even) as earliest
-- (lib/earliest.lua) reads them: the head at a rank (nil once not due), and
-- a count. The first entry of each source, due or not, goes to first[k] (a
-- partition given nothing takes its next due time from there); why a source
-- could not be read goes to unreadable[k].
local function due_of(p0, first, unreadable)
  local function key_of(k)
    return KEYS[6 * (p0 + math.floor((k - 1) / 2)) + 1 + (k - 1) % 2]
  end
  local function head(k, rank)
    local score, why = rank_score(key_of(k), rank)
    if why then
      unreadable[k] = why
      return nil
    end
    if rank == 0 then first[k] = score end
    if score and tonumber(score) <= now then return score end
    return nil
  end
  local function upto(k, score)
    return redis.call('ZCOUNT', key_of(k), '-inf', score or now_s)
  end
  return head, upto
end

-- The lower of two scores as read (nil: none), '' when both are nil.
local function lowest(x, y)
  if not (x and y) then return x or y or '' end
  if tonumber(y) < tonumber(x) then return y end
  return x
end

local out = {now_s}
-- Over several partitions: when none of their scheduled and retry_wait zsets
-- exists (Redis drops an empty one), nothing is due or waiting, told by one
-- EXISTS instead of two head reads per partition (an idle worker's look).
if #KEYS > 6 then
  local waiting = {}
  for b = 0, #KEYS - 6, 6 do
    waiting[#waiting + 1] = KEYS[b + 1]
    waiting[#waiting + 1] = KEYS[b + 2]
  end
  if redis.call('EXISTS', unpack(waiting)) == 0 then
    for p = 1, #KEYS / 6 do out[p + 1] = {0, '', new_aside()} end
    return out
  end
end
local remaining, p0 = tonumber(ARGV[1]), 0
for g = 2, #ARGV do
  local size = tonumber(ARGV[g])
  local took, first, unreadable = {remaining, 0}, nil, {}
  if size > 1 then
    first = {}
    local head, upto = due_of(p0, first, unreadable)
    took = earliest(2 * size, remaining, head, upto)
  end
  for k = 1, size do
    local p = p0 + k
    local share = (took[2 * k - 1] or 0) + (took[2 * k] or 0)
    local ok, res, looked = false, unreadable[2 * k - 1] or unreadable[2 * k], 0
    if res then
      ok = false
    elseif share == 0 and first then
      -- nothing to promote: its next due time is its first entry (due now
      -- when the limit was used up before it: the caller comes back at once)
      ok, res = true, {0, lowest(first[2 * k - 1], first[2 * k]), new_aside()}
    else
      -- A failure (a key of the wrong type) comes before the partition's
      -- first write and stops only this partition.
      ok, res, looked = pcall(promote_partition, p, share)
    end
    if ok then
      remaining = remaining - looked
    elseif type(res) == 'table' then
      res = tostring(res.err)
    else
      res = tostring(res)
    end
    out[p + 1] = res
  end
  p0 = p0 + size
end
return out
