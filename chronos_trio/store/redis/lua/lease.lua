-- lease.lua: lease up to ARGV[1] ready jobs of the partitions in KEYS (one or
-- more, of one queue), oldest due first across them: the batch is the
-- ARGV[1] earliest ready jobs of all of them by due time (within a
-- partition ties go by job ID, across partitions partition by partition).
-- On a single node one call leases a whole queue; on a
-- Cluster, whose scripts touch one slot, the client calls it per partition
-- with that partition's share.
--
-- KEYS[1+6i .. 6+6i], per partition i = 0, 1, ... (partition p = i + 1 below):
--   KEYS[1+6i]  ready zset (score = run_at)
--   KEYS[2+6i]  leased zset (score = lease expiry). It always holds the sentinel
--          member ARGV[5] with score +inf: a member longer than 64 bytes makes
--          Redis keep the zset as a skiplist, whose inserts stay O(log n); as a
--          listpack (any zset under 128 members, i.e. a typical in-flight set)
--          each insert scans the whole zset, which dominated this script.
--   KEYS[3+6i]  fencing counter of the partition (INCRBY)
--   KEYS[4+6i]  job key prefix: the job hash of ID x is KEYS[4+6i]..x
--   KEYS[5+6i]  dead zset (score = finished_at): where damaged records go
--   KEYS[6+6i]  quarantine hash of the partition: ready entries without a job hash
-- ARGV[1]  count (> 0)
-- ARGV[2]  lease duration in seconds
-- ARGV[3]  worker id (lease owner)
-- ARGV[4]  token nonce: random per call. The call's tokens are nonce..counter,
--          the counter of the first partition that leases (INCRBY ARGV[1]),
--          counted up across the call: unique across partitions and calls
--          (counter), even after Redis lost its data and the counter
--          restarted (nonce).
-- ARGV[5]  the leased zset's sentinel member (see KEYS)
-- ARGV[6]  (one partition only; optional, '' none) a bound: jobs beyond
--          ARGV[1] are leased in place of those set aside or held back
--          only while their score is <= it (the next ready job of the
--          queue's other partitions, which comes first after it). The
--          first entry above it goes back unjudged, and the call stops.
-- ARGV[7]  (one partition only; optional, default 0) how many entries at
--          the head of the ready zset to pass over: the jobs an earlier
--          call of the same lease held back (a Cluster's further rounds)
-- ARGV[8]  (one partition only; optional) how many entries to look at, at
--          most (default ARGV[1] + 256)
--
-- With several partitions, the count is split first, in one order by due
-- time (see lib/earliest.lua: it reads their heads and counts);
-- partitions with no share are not touched further. Each partition then
-- looks at exactly its share; what was set aside, expired or held back is
-- replaced in further rounds, the rest of the count split again over what
-- no round looked at yet (held-back jobs go back to the ready zsets only
-- at the end of the call): the batch is the first ARGV[1] jobs that can be
-- leased in the queue's one order, as on a single partition.
--
-- Each popped entry is judged before anything is written for it (nothing in a
-- judgement can fail; see README.md): a record without kind or payload,
-- whose attempts is not a count or whose state is no job state, is
-- dead-lettered, an entry without a job hash is quarantined, a record of a
-- newer format goes back to the ready zset with its score, untouched. What
-- was set aside is replaced by the next ready jobs in the queue's order
-- (see below), so the batch is short only for want of usable ready jobs (at
-- most ARGV[1] + 256 entries are looked at per call). A state other than ready is not judged further: the index it is in
-- decides, and the lease overwrites it. The fields returned as
-- stored (kind, run_at, max_retries, timeout, created_at, headers, flow
-- control) are judged where they are decoded, by the client (number parsing
-- is the costliest part of a Lua check), by the rules every path judges a
-- record by (store/_record_rules.py): it dead-letters a job whose fields it
-- cannot use with this lease's token, so no worker is ever handed one, and
-- the lease judges a ready record exactly as the store checker does.
--
-- A key of the wrong type among a partition's keys fails that partition
-- before anything is written in it (checked first: a pop must never be
-- followed by a failure); the others are leased as usual.
--
-- Flow control (field fc, see lib/ready_score.lua) is judged in the same step: a
-- job past its expiry is dead-lettered ("expired: ...") instead of leased;
-- one whose rate limit has no permit now, or whose concurrency limit has
-- no free slot, goes back to the ready zset with its score, untouched (no
-- attempt counted) and is replaced like a record set aside (that limit's
-- zset goes into the partition's <tag>:waiting set: the settle that frees
-- its slot wakes idle leasers). A unique job's key has such a limit of 1,
-- its run slot (records/_unique.py). A lease takes
-- a permit of each rate limit (the GCRA's theoretical arrival time moves
-- one interval on) and a slot of each concurrency limit (the job joins its
-- zset at its lease expiry). A slot's holder whose recorded expiry passed
-- is kept (at its renewed expiry) only while still leased: a settle gives
-- a slot back at once, a dead worker's slot comes back when its lease
-- expires, whether or not recovery ran. A priority moved the ready score
-- (ready_score); the run_at returned is the job's field, the due time itself.
--
-- Returns {now, expires_at, then per partition p in KEYS order: {} when it
-- had no share or no ready job, the reason (a string) when it failed, else
-- {set aside (see README.md), flow {expired: per job the id then the 13
-- JOB_FIELDS as stored afterwards, held_until: when the next permit of a
-- rate limit that held a job back comes ('' none), capped: 1 when a
-- concurrency limit held one back, else 0, controls: per leased job with
-- flow control its number in this part (1, 2, ...) then its fc, held: how
-- many entries it judged and put back at the head of its ready zset (held
-- back, or of a newer format), more: 0 when its ready zset ran out, else 1,
-- looked: how many entries it looked at, continuations: per leased job
-- with a workflow continuation its number in this part then its extras
-- (field x: the worker works out a chain link's successor from it, see
-- settle.lua's kind 'c')}, then per
-- job 11 entries: id, token, kind, payload, run_at ('' for none), attempts
-- (already incremented), max_retries, timeout, last_error, created_at,
-- headers ('' for none)}}. now and expires_at are '' when no partition had a
-- ready job (TIME is read only then).
--@include check_count
--@include check_format
--@include check_job_state
--@include check_text
--@include chunk_sizes
--@include clock
--@include continues
--@include dead_letter
--@include earliest
--@include format
--@include huge
--@include is_count
--@include job_fields
--@include join_payload
--@include limit_key
--@include list_of
--@include missing
--@include new_aside
--@include newer
--@include notify_done
--@include probe_job
--@include quarantine
--@include rank_score
--@include unique_finished
--@include wrong_type
local target = tonumber(ARGV[1])
local parts = #KEYS / 6
local now, now_s, exp_s = nil, '', ''
local out = {now_s, exp_s}
-- The call's tokens: ARGV[4]..(counter + issued), see tokens_from.
local counter, issued = nil, 0

-- The fencing counter's value before this call's tokens, taken (INCRBY
-- ARGV[1], the most this call can issue) from the counter of the first
-- partition that leases: nil and why when that counter is not a counter.
local function tokens_from(key)
  if not counter then
    local got = redis.pcall('INCRBY', key, target)
    if type(got) == 'table' then
      return nil, 'key ' .. key .. ' is not a counter (' .. tostring(got.err) .. '): nothing done'
    end
    counter = got - target
  end
  return counter
end

-- Entries judged and put back (held back by a limit, or of a newer
-- format) per ready zset: written back at the end of the call, so that no
-- later round of the call looks at them again.
local backs = {}

-- The next n entries of the ready zset, from rank skip on, taken out of it:
-- {id, score, id, score, ...}.
local function pop(ready, skip, n)
  if skip == 0 then return redis.call('ZPOPMIN', ready, n) end
  local got = redis.call('ZRANGE', ready, skip, skip + n - 1, 'WITHSCORES')
  for c = 1, #got, 2000 do
    local ids = {}
    for i = c, math.min(c + 1998, #got - 1), 2 do ids[#ids + 1] = got[i] end
    redis.call('ZREM', ready, unpack(ids))
  end
  return got
end

-- Flow control state of this call, read once per key and call: parsed fc
-- texts, the rate limits' theoretical arrival times (written back at the
-- end), the concurrency limits' holder counts.
local flows, tats, moved, slots, listed_in, taken, waited = {}, {}, {}, {}, {}, {}, {}

local function parse_flow(fc)
  local got = flows[fc]
  if got then return got end
  got = {rates = {}, caps = {}}
  for item in string.gmatch(fc, '[^\n]+') do
    local tag = string.sub(item, 1, 1)
    if tag == 'e' then
      got.exp = tonumber(string.sub(item, 2))
    elseif tag == 'r' then
      local count, per, burst, key = string.match(item, '^r(%d+)/([^/]+)/(%d+)/(.+)$')
      local interval = count and tonumber(per) and tonumber(per) / tonumber(count)
      if interval and interval > 0 then
        got.rates[#got.rates + 1] = {key, interval, (tonumber(burst) - 1) * interval}
      end
    elseif tag == 'c' then
      local limit, key = string.match(item, '^c(%d+)/(.+)$')
      if key then got.caps[#got.caps + 1] = {key, tonumber(limit)} end
    end
  end
  flows[fc] = got
  return got
end

-- A rate limit's theoretical arrival time (0: never used, or lapsed). A
-- key that is not a number is read as 0 and overwritten at the end.
local function tat_of(k)
  local t = tats[k]
  if t == nil then
    local v = redis.pcall('GET', k)
    t = type(v) == 'string' and tonumber(v) or 0
    tats[k] = t
  end
  return t
end

-- How many slots of the concurrency limit zset k are held now. Holders
-- whose recorded expiry passed were renewed since (kept, at the new
-- expiry) or are gone (removed). A key of another type is replaced.
local function held_by(k, prefix, now)
  local n = slots[k]
  if n then return n end
  local t = redis.call('TYPE', k).ok
  if t ~= 'zset' and t ~= 'none' then redis.call('DEL', k) end
  local stale = redis.call('ZRANGE', k, '-inf', now, 'BYSCORE')
  for _, m in ipairs(stale) do
    local h = redis.pcall('HMGET', prefix .. m, 'state', 'lease_expires_at')
    local until_ = type(h) == 'table' and not h.err and h[1] == 'leased' and tonumber(h[2])
    if until_ and until_ > now and until_ < HUGE then
      redis.call('ZADD', k, until_, m)
    else
      redis.call('ZREM', k, m)
    end
  end
  n = redis.call('ZCARD', k)
  slots[k] = n
  return n
end

-- Whether flow (parsed) lets its job be leased now: nil (yes), 'expired',
-- 'held' and when its next permit comes, or 'capped' and the zset of the
-- concurrency limit that is full.
local function admit(flow, prefix, now)
  if flow.exp and now >= flow.exp then return 'expired' end
  local until_ = nil
  for _, r in ipairs(flow.rates) do
    local at = tat_of(limit_key(prefix, 'rl', r[1])) - r[3]
    if now < at and (not until_ or at > until_) then until_ = at end
  end
  if until_ then return 'held', until_ end
  for _, c in ipairs(flow.caps) do
    local k = limit_key(prefix, 'cap', c[1])
    if held_by(k, prefix, now) >= c[2] then return 'capped', k end
  end
  return nil
end

-- Take flow's permits and slots for job id, leased until exp_s.
local function take(flow, prefix, id, now, exp_s)
  for _, r in ipairs(flow.rates) do
    local k = limit_key(prefix, 'rl', r[1])
    tats[k] = math.max(tats[k], now) + r[2]
    moved[k] = true
    listed_in[k] = true
  end
  for _, c in ipairs(flow.caps) do
    local k = limit_key(prefix, 'cap', c[1])
    -- the slot is taken now (slots counts it), written at the end: one
    -- ZADD per limit and call
    local add = list_of(taken, k)
    add[#add + 1] = exp_s
    add[#add + 1] = id
    slots[k] = slots[k] + 1
    -- a unique key's run slot (its key starts with \31, see
    -- records/_unique.py) is not listed: a key per job key must not pile up
    if string.byte(c[1], 1) ~= 31 then listed_in[k] = true end
  end
end

-- Write back the arrival times this call moved; each key lapses when its
-- time has come (its state is then that of a fresh limit). Then the slots
-- taken, and every limit key used (but a unique key's run slot) listed in
-- its partition's <tag>:limits (for inspection).
local function flush_tats(now)
  for k in pairs(moved) do
    local t = tats[k]
    redis.call('SET', k, string.format('%.17g', t), 'PX', math.max(1, math.ceil((t - now) * 1000)))
  end
  for k, add in pairs(taken) do
    for c = 1, #add, 1000 do
      redis.call('ZADD', k, unpack(add, c, math.min(c + 999, #add)))
    end
  end
  for k in pairs(listed_in) do
    local tag_end = string.find(k, '}:', 1, true)
    redis.call('SADD', string.sub(k, 1, tag_end + 1) .. 'limits', string.sub(k, tag_end + 2))
  end
  -- the limits that held a job back: a settle that frees their slot wakes
  -- leasers (lib/give_back_slots.lua); pcall: a hint, never a failure
  for k in pairs(waited) do
    local tag_end = string.find(k, '}:', 1, true)
    redis.pcall('SADD', string.sub(k, 1, tag_end + 1) .. 'waiting', k)
  end
end

-- Put back what the call held back or passed over (see backs), with
-- the scores they had.
local function flush_backs()
  for ready, back in pairs(backs) do
    for c = 1, #back, 1000 do
      redis.call('ZADD', ready, unpack(back, c, math.min(c + 999, #back)))
    end
  end
end

-- Epoch seconds t as UTC ISO 8601, whole milliseconds rounded down
-- ("2026-12-01T10:33:56.169Z"): records._control.expired_error's text.
-- The date is the proleptic Gregorian calendar's (days from 1970-03-01 in
-- 400-year eras), exact in doubles for any time a job can carry.
local function iso_utc(t)
  local ms = math.floor(t * 1000)
  local s = math.floor(ms / 1000)
  ms = ms - s * 1000
  local days = math.floor(s / 86400)
  local secs = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', year, month, day,
    math.floor(secs / 3600), math.floor(secs / 60) % 60, secs % 60, ms)
end

-- Dead-letter the ready job at key, past its expiry, into info (see the reply).
local function expire(info, prefix, key, id, dead, exp, now, now_s)
  redis.call('ZADD', dead, now, id)
  redis.call('HSET', key, 'state', 'dead', 'last_error',
    'expired: not started by ' .. iso_utc(exp) .. ' (its expires_at)',
    'finished_at', now_s, 'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  unique_finished(prefix, id, redis.call('HGET', key, 'x'), false)
  local e = info[1]
  e[#e + 1] = id
  local g = job_fields(key)
  for k = 1, 13 do e[#e + 1] = g[k] or '' end
  notify_done(key, redis.call('HGET', key, 'w'))
end

-- Lease up to share jobs of partition p, looking at no more than budget
-- entries, into res (its part of the reply so far, or nil). lone: p is the
-- call's only partition, and replaces what it sets aside by its own next
-- jobs (up to ARGV[6], from rank ARGV[7] on); else it looks at exactly
-- share entries. Returns its part ({} when its ready zset is empty), or
-- why it failed; then how many jobs it leased and how many entries it
-- looked at.
local function lease_partition(p, share, budget, res, lone)
  local b = 6 * (p - 1)
  local ready, leased, dead, damaged = KEYS[b + 1], KEYS[b + 2], KEYS[b + 5], KEYS[b + 6]
  local prefix = KEYS[b + 4]
  local size = redis.pcall('ZCARD', ready)
  if type(size) == 'table' then
    return 'key ' .. ready .. ': ' .. tostring(size.err) .. ': nothing done', 0, 0
  end
  if size == 0 then return res or {}, 0, 0 end
  local bad_key = wrong_type(leased, 'zset', dead, 'zset', damaged, 'hash')
  if bad_key then return bad_key, 0, 0 end
  -- The tokens before the pop: INCRBY is the one call here that could fail
  -- (a counter key of another type), so it comes before any write.
  local base, why_not = tokens_from(KEYS[b + 3])
  if not base then return why_not, 0, 0 end
  if not now then
    now, now_s = clock()
    exp_s = string.format('%.17g', now + tonumber(ARGV[2]))
    out[1], out[2] = now_s, exp_s
  end
  res = res or {new_aside(), {{}, '', 0, {}, 0, 1, 0, {}}}
  local aside, info = res[1], res[2]
  local asked, looked, n = share, 0, 0
  local back = list_of(backs, ready)
  local before, unjudged = #back, 0
  local bound = lone and tonumber(ARGV[6] or '') or nil
  local skip = lone and tonumber(ARGV[7] or '') or 0
  local replacing, cut = false, false
  local scored = {'+inf', ARGV[5]}  -- sentinel first: the zset is converted before the inserts
  local popped = pop(ready, skip, asked)
  while #popped > 0 do
    local got = #popped
    if replacing and bound then
      for i = 1, got, 2 do
        if tonumber(popped[i + 1]) > bound then
          -- past the bound another partition's job comes first: these go
          -- back unjudged, with their scores, and the call stops
          for k = i, got, 2 do
            back[#back + 1] = popped[k + 1]
            back[#back + 1] = popped[k]
            popped[k], popped[k + 1] = nil, nil
            unjudged = unjudged + 1
          end
          cut = true
          break
        end
      end
    end
    looked = looked + #popped / 2
    for i = 1, #popped, 2 do
      local id = popped[i]
      local key = prefix .. id
      local f = redis.pcall('HMGET', key, 'v', 'kind', 'payload', 'attempts', 'max_retries',
        'timeout', 'last_error', 'created_at', 'h', 'fc', 'state', 'run_at', 'x')
      local none = nil
      if not f[2] then f, none = probe_job(key, f, 13) end
      if not f then
        quarantine(aside, damaged, id, none, 'ready', now)
      else
        local v, why = f[1], nil
        if v and v ~= FORMAT_S then why = check_format(v) end
        -- the state is overwritten, but must be one (a record the ready index
        -- holds in another state is leased: the index decides)
        if not why and f[11] ~= 'ready' then why = check_job_state(f[11]) end
        local payload, chunks_why = f[3], nil
        if not why and f[3] and #f[3] == CHUNK then
          -- only a first chunk is CHUNK bytes long: the field lookup is spared
          -- for every other payload (a listpack lookup of an absent field
          -- scans it whole)
          local pn = redis.call('HGET', key, 'pn')
          if pn then payload, chunks_why = join_payload(key, f[3], pn) end
        end
        if why == 'newer' then
          back[#back + 1] = popped[i + 1]
          back[#back + 1] = id
          newer(aside, id, v)
        elseif why or chunks_why or not f[2] or f[2] == '' or not f[3] or not is_count(f[4]) then
          -- the cheap checks first; the reason is worked out only for a bad record
          why = why or check_text('kind', f[2]) or chunks_why
            or (not f[3] and missing('payload', f[3])) or check_count('attempts', f[4])
          dead_letter(aside, key, id, dead, why, now, now_s)
        else
          local fc, verdict, until_ = f[10], nil, nil
          local flow = fc and parse_flow(fc)
          if flow then verdict, until_ = admit(flow, prefix, now) end
          if verdict == 'expired' then
            expire(info, prefix, key, id, dead, flow.exp, now, now_s)
          elseif verdict then
            -- held back by a limit: back with its score, nothing written
            back[#back + 1] = popped[i + 1]
            back[#back + 1] = id
            if verdict == 'capped' then
              info[3] = 1
              waited[until_] = true  -- the limit's zset: its next free slot wakes leasers
            elseif info[2] == '' or until_ < tonumber(info[2]) then
              info[2] = string.format('%.17g', until_)
            end
          else
          if flow then take(flow, prefix, id, now, exp_s) end
          n = n + 1
          issued = issued + 1
          local token = ARGV[4] .. (base + issued)
          local attempts = tonumber(f[4]) + 1
          redis.call('HSET', key, 'state', 'leased', 'attempts', attempts, 'lease_token', token,
            'lease_owner', ARGV[3], 'lease_expires_at', exp_s)
          scored[#scored + 1] = exp_s
          scored[#scored + 1] = id
          local o = #res
          res[o + 1] = id
          res[o + 2] = token
          res[o + 3] = f[2]
          res[o + 4] = payload
          res[o + 5] = f[12] or ''  -- the due time, as stored (the client judges it)
          res[o + 6] = attempts
          res[o + 7] = f[5]
          res[o + 8] = f[6]
          res[o + 9] = f[7] or ''
          res[o + 10] = f[8]
          res[o + 11] = f[9] or ''
          if fc then
            -- told apart from the plain jobs' (no reply entry for those)
            local controls = info[4]
            controls[#controls + 1] = (o - 2) / 11 + 1
            controls[#controls + 1] = fc
          end
          if f[13] and continues(f[13]) then
            -- a workflow job: its continuation too (no entry for the others)
            local thens = info[8]
            thens[#thens + 1] = (o - 2) / 11 + 1
            thens[#thens + 1] = f[13]
          end
          end
        end
      end
    end
    if got < 2 * asked and not cut then info[6] = 0 end  -- its ready zset ran out
    local more = math.min(share - n, budget - looked)
    if cut or not lone or got < 2 * asked or more <= 0 then break end
    asked, replacing = more, true
    popped = pop(ready, skip, more)
  end
  if lone and n < share and not cut and info[6] == 1 and redis.call('ZCARD', ready) <= skip then
    info[6] = 0  -- short, and all it has left is what earlier rounds held back
  end
  info[5] = info[5] + (#back - before) / 2 - unjudged
  info[7] = info[7] + looked
  if n > 0 then
    for c = 1, #scored, 1000 do
      redis.call('ZADD', leased, unpack(scored, c, math.min(c + 999, #scored)))
    end
  end
  return res, n, looked
end

-- At most ARGV[1] + 256 entries are looked at per call (or ARGV[8]).
local budget = target + 256

if parts == 1 then
  budget = tonumber(ARGV[8] or '') or budget
  out[3] = lease_partition(1, target, budget, nil, true)
  flush_backs()
  if now then flush_tats(now) end
  return out
end

-- No ready zset exists (Redis drops an empty one): nothing to lease, told by
-- one EXISTS instead of a head read per partition (an idle worker's look).
local readies = {}
for p = 1, parts do readies[p] = KEYS[6 * (p - 1) + 1] end
if redis.call('EXISTS', unpack(readies)) == 0 then
  for p = 1, parts do out[p + 2] = {} end
  return out
end

-- Split what is still wanted in one order by due time; what a round set
-- aside, expired or held back is made up for in another round, split again
-- over the entries no round looked at yet (the held-back ones are out of
-- the ready zsets until the end of the call).
local unreadable = {}
local function ready_of(p)
  return KEYS[6 * (p - 1) + 1]
end
local function head(p, rank)
  if unreadable[p] then return nil end
  local score, why = rank_score(ready_of(p), rank)
  if why then unreadable[p] = why end
  return score
end
local function upto(p, score)
  return redis.call('ZCOUNT', ready_of(p), '-inf', score or '+inf')
end
local want = target
while want > 0 and budget > 0 do
  local took = earliest(parts, math.min(want, budget), head, upto)
  local asked, got = 0, 0
  for p = 1, parts do
    if took[p] > 0 then
      asked = asked + took[p]
      local part, n, looked = lease_partition(p, took[p], budget, out[p + 2], false)
      if type(part) == 'string' then unreadable[p] = part end
      out[p + 2] = part
      got, budget = got + n, budget - looked
    end
  end
  want = want - got
  if got == asked then break end
end
for p = 1, parts do
  out[p + 2] = unreadable[p] or out[p + 2] or {}
end
flush_backs()
if now then flush_tats(now) end
return out
