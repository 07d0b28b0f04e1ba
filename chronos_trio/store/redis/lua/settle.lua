-- settle.lua: apply lease outcomes in the partitions in KEYS (one or more),
-- each fenced by its token. On a single node one call settles a batch over
-- all its partitions; on a Cluster, whose scripts touch one slot, the client
-- calls it per partition.
--
-- KEYS[1+6i .. 6+6i], per partition i = 0, 1, ... (partition p = i + 1 below):
--   KEYS[1+6i]  ready zset (score = run_at)
--   KEYS[2+6i]  leased zset (score = lease expiry)
--   KEYS[3+6i]  retry_wait zset (score = run_at)
--   KEYS[4+6i]  succeeded zset (retained jobs, and jobs whose result lives;
--          score = end of retention)
--   KEYS[5+6i]  dead zset (score = finished_at)
--   KEYS[6+6i]  job key prefix: the job hash of ID x is KEYS[6+6i]..x
-- ARGV[1+i], per partition i: how many settlements of that partition follow
-- then ARGV[P+1+8j .. P+8+8j] (P = number of partitions), per settlement j,
--          partition by partition in KEYS order: job id, fencing token,
--          kind ('s' succeeded, 'k' the same, its record written
--          compactly if kept: see lib/succeed_record.lua, 'r' retry, 'd'
--          dead, 'x' discard, 'l' release,
--          'f' deferred: retry without counting the attempt, see hold_back, 'a'
--          aborted, 'u' unclaimed: see below; in upper case for a job with
--          flow control, whose field fc is then read), error text (for 'a':
--          the last_error when no abort was asked; for 'u': the last_error
--          if it dead-letters the job),
--          retry_delay (s), retain_for (s; for 'u': the grace, see below),
--          result, result_ttl (s; '' when there is no result to keep; for
--          any kind but 's': when the attempt's lease was granted, '' when
--          not known, kept in its attempt history)
-- then, after every settlement, the successors (17 entries each), one per
--          settlement of kind 'c' (below), in the order of those: the 9
--          entries of a job as enqueue.lua takes them (id, kind, payload,
--          run_at: always '', delay, max_retries, timeout, headers, extras:
--          its continuation), then the keys of the partition it goes to:
--          its ready zset, its "closed" marker and its job key prefix, then
--          its workflow's record hash ('' for none), then its lease when
--          the settling worker takes it over (see below): the partition's
--          leased zset, the fencing token ('' for no lease: the successor
--          is stored ready), the lease duration (s) and the worker's ID
--          (the lease owner). Only a single node
--          (standalone or Sentinel) is sent kind 'c': these keys are not in
--          KEYS (they may be of other partitions), which a Cluster refuses.
--
-- Kind 'c' (upper case 'C' with flow control) is a success ('s') of a chain
-- link whose next step is one ordinary job due now, its successor (see
-- records/_workflow.py's chain_successor, worked out by the worker): when
-- the job's continuation is there, its workflow's record carries no cancel
-- mark (field x, see workflow_cancel.lua) and the successor's partition is
-- not closed, the successor is stored in this same step, under its
-- deterministic ID, as enqueue.lua stores a ready job (an existing key of
-- that ID is left alone), and no outbox entry is written (code 7).
-- Otherwise it is a success like any other: its continuation goes to the
-- outbox (code 4), where the continuer checks the mark again. Reading the
-- mark here, in the step that makes the successor, is what keeps a cancel
-- whole: a cancel marked before this step stops the successor here; one
-- marked after it finds the successor stored (its sweep starts after the
-- mark). The record is kept WORKFLOW_KEEP more (never shortened): its flow
-- runs on (see records/_flow_keep.py).
--
-- A successor given a token is stored already leased to the settling
-- worker (code 8), exactly as lease.lua leases a ready job: state leased,
-- its first attempt counted, the token, owner and expiry (now + the
-- duration) written, and the job in its partition's leased zset (with the
-- sentinel, see lease.lua) at its expiry; it is not put in the ready zset
-- and nobody is woken. From then on it is a lease like any other: fenced
-- by that token, renewed by its worker, and taken back by recovery once it
-- expires if the worker died. The token is the worker's (a random nonce
-- of the process and a count: never one lease.lua issues). A successor
-- that is not created now (cancelled, closed partition, its ID taken)
-- is not leased: the codes are 4 and 7 as above.
--
-- A success whose continuation asks for nothing (a flow's last step, a
-- failure callback: see lib/nothing_follows.lua) writes no outbox entry
-- (code 1): its record is kept as every workflow job's is (WORKFLOW_KEEP).
--
-- Every outcome but a success (and a discard, which deletes the record)
-- adds the attempt it ends to the job's attempt history (field ah, see
-- lib/add_attempt.lua) in this same step: a success writes nothing more, its
-- attempt is derived from the record.
--
-- A succeeded job's record stays while it is retained (in the succeeded
-- index, trimmed by the janitor) or its result lives, whichever is longer;
-- kept only for its result, it is in no index and expires by itself
-- (PEXPIRE: nothing to trim). Its run_at stays the due time it ran for.
-- With kind 'k' (the store's compact_succeeded) its lease fields are
-- dropped, and a record kept a while (retained, or for its result) is
-- rewritten as a compact listpack, its payload in chunks, when its values
-- fit (see lib/succeed_record.lua). A
-- finished job (succeeded or dead) whose record names a waiter channel
-- (field w) is published there (see notify_done), and a unique job's lock
-- is released (a throttle's starts its ttl; see unique_finished). A
-- discarded job (failed for good, kept by nobody) is deleted; one whose
-- record names a waiter channel is kept as dead, in no index, and expires by
-- itself after WAITED_KEEP, so its waiters read the failure. An aborted
-- job (kind 'a', or 'r', 'l', 'f', 'u' of a job an abort was asked for: field
-- ab, see abort.lua; the abort wins over running it again) is kept like a dead
-- one (abort_job), its last_error the abort's.
--
-- Unclaimed ('u': the worker has no handler for the job's kind): back to
-- retry_wait after retry_delay, the attempt given back, for a worker that has
-- one; field uc keeps when this first happened (store clock, kept across
-- bounces; see unclaimed_since). Once uc is the grace old or more, the job is
-- dead-lettered instead (the attempt given back too) with code 6. uc is
-- advisory: a value that is not a decimal finite number, or is later than
-- now, counts as none and is stamped anew (it can only put a dead-letter off
-- by one grace), so it is never damage. A retry or deferral clears it (a
-- worker with the handler ran the job), and so do recover.lua and
-- requeue_dead.lua; a release keeps it.
--
-- Each record is judged before anything is written for it (see README.md;
-- nothing in a judgement can fail, so no record can stop the script after
-- another's writes). A record not leased with that token (or with no job hash)
-- is not ours and is not touched, damaged or not. One leased with that token
-- whose lease_expires_at (or, to retry it, run_at; to release or defer it,
-- attempts or run_at) is unreadable is dead-lettered; one of a newer format is
-- left untouched. Each outcome
-- writes the index before the record: a key of the wrong type stops its
-- partition with that record unchanged (outcomes before it stay applied);
-- the other partitions are settled as usual.
--
-- Returns {now, then per partition p in KEYS order: the reason (a string)
-- when it stopped, else {set aside (see README.md), code_1, code_2, ...}};
-- code 1 applied, 0 the lease is no longer held with that token (or
-- expired): the job is not touched at all, 2 dead-lettered as damaged, 3 left
-- alone (newer format), 4 applied, and a workflow continuation was queued
-- (a success's, or a dead job's whose continuation holds failure handling),
-- 5 applied: the job is aborted, 6 applied: dead-lettered as unclaimed past
-- its grace ('u'), 7 applied, and its successor stored ('c', see above; or
-- found stored already) instead of an outbox entry, 8 applied, and its
-- successor stored leased to the settling worker (see above); after the codes, how many concurrency slots the batch
-- gave back that a job was held back for (see give_back_slots in
-- lib/give_back_slots.lua: the client then wakes idle leasers).
-- How long a finished job nobody keeps stays readable for its waiters (s).
--@include abort_job
--@include add_attempt
--@include check_count
--@include check_number
--@include clock
--@include continues
--@include dead_letter
--@include drop_idle_leased
--@include fails
--@include find
--@include format
--@include give_back_slots
--@include huge
--@include keep_discarded_place
--@include leased_sentinel
--@include judge_lease
--@include limit_key
--@include new_aside
--@include newer
--@include notify_done
--@include nothing_follows
--@include outbox_key
--@include probe_job
--@include ready_score
--@include release_slots
--@include succeed_record
--@include unique_finished
--@include workflow_keep
--@include write_record
--@include zrem_all
local WAITED_KEEP = 60
local now, now_s = clock()
local parts = #KEYS / 6
-- the next successor's first entry in ARGV (see kind 'c'), set below
local succ_next
-- whether each successor partition's "closed" marker exists, by its key:
-- read once per call (nothing in this script closes a partition, so the
-- answer holds for the whole call; a batch's links mostly go to one)
local closed_memo = {}
-- The numbers of the call's duration arguments, and the times now + d as
-- '%.17g' writes them (the text redis.call makes of a Lua number), each
-- worked out once per call and value: a batch's settlements mostly share
-- their durations, and formatting and parsing numbers is a good part of
-- what a settlement costs the server.
local num_memo, later_memo = {}, {}

-- tonumber(s), s an argument (a string)
local function num(s)
  local v = num_memo[s]
  if v == nil then
    v = tonumber(s) or false
    num_memo[s] = v
  end
  return v or nil
end

-- string.format('%.17g', now + d)
local function later_s(d)
  local v = later_memo[d]
  if not v then
    v = string.format('%.17g', now + d)
    if d == d then later_memo[d] = v end  -- (NaN is no table key)
  end
  return v
end

-- Store the successor at ARGV[t ..] (see kind 'c'), unless its workflow is
-- marked cancelled or its partition closed: 8 when it is stored leased to
-- the settling worker, 7 when it is stored ready or its ID was taken
-- already (then nothing is written), false when it is not stored.
local function continue_chain(t)
  local mark = ARGV[t + 12]
  if mark ~= '' and redis.call('HEXISTS', mark, 'x') == 1 then return false end
  local left = mark ~= '' and redis.call('TTL', mark)
  if left and left >= 0 and left < WORKFLOW_KEEP then
    redis.call('EXPIRE', mark, WORKFLOW_KEEP)  -- its flow runs on: its record too
  end
  local marker = ARGV[t + 10]
  local closed = closed_memo[marker]
  if closed == nil then
    closed = redis.call('EXISTS', marker) == 1
    closed_memo[marker] = closed
  end
  if closed then return false end
  local id = ARGV[t]
  local key = ARGV[t + 11] .. id
  if redis.call('EXISTS', key) == 0 then
    local token = ARGV[t + 14]
    if token ~= '' then
      -- leased to the settling worker (see above): the index first
      local argv = ARGV
      local exp_s = later_s(num(argv[t + 15]))
      redis.call('ZADD', argv[t + 13], '+inf', LEASED_SENTINEL, exp_s, id)
      -- write_record's fields (in its order), the lease's, then h and x:
      -- one HSET for the common link (no headers, a continuation)
      local h, x = argv[t + 7], argv[t + 8]
      if h == '' and x ~= '' then
        redis.call('HSET', key, 'kind', argv[t + 1], 'payload', argv[t + 2], 'run_at', now_s,
          'state', 'leased', 'attempts', '1', 'max_retries', argv[t + 5],
          'timeout', argv[t + 6], 'created_at', now_s, 'v', FORMAT_S, 'lease_token', token,
          'lease_owner', argv[t + 16], 'lease_expires_at', exp_s, 'x', x)
        return 8
      end
      redis.call('HSET', key, 'kind', argv[t + 1], 'payload', argv[t + 2], 'run_at', now_s,
        'state', 'leased', 'attempts', '1', 'max_retries', argv[t + 5],
        'timeout', argv[t + 6], 'created_at', now_s, 'v', FORMAT_S, 'lease_token', token,
        'lease_owner', argv[t + 16], 'lease_expires_at', exp_s)
      if h ~= '' then redis.call('HSET', key, 'h', h) end
      if x ~= '' then redis.call('HSET', key, 'x', x) end
      return 8
    end
    write_record(key, t, now_s, 'ready', now_s)
    if ARGV[t + 8] ~= '' then redis.call('HSET', key, 'x', ARGV[t + 8]) end
    redis.call('ZADD', ARGV[t + 9], now_s, id)
  end
  return 7
end

-- The time field uc holds (see 'u' above), or nil: absent, not a decimal
-- finite number (the same texts _codec.parse_number reads), or later than now.
local function unclaimed_since(uc)
  if not uc or find(uc, '[xX_]') then return nil end
  local x = tonumber(uc)
  if x and x == x and x > -HUGE and x <= now then return x end
  return nil
end

-- No permit of the rate limits in flow control fc before time until: each
-- limit's theoretical arrival time moves to at least until + its tolerance.
local function hold_back(prefix, fc, until_)
  if not fc then return end
  for item in string.gmatch(fc, '[^\n]+') do
    local count, per, burst, key = string.match(item, '^r(%d+)/([^/]+)/(%d+)/(.+)$')
    local interval = count and tonumber(per) and tonumber(per) / tonumber(count)
    if interval and interval > 0 then
      local k = limit_key(prefix, 'rl', key)
      local floor = until_ + (tonumber(burst) - 1) * interval
      local tat = tonumber(redis.pcall('GET', k)) or 0
      if floor > tat then
        redis.call('SET', k, string.format('%.17g', floor), 'PX',
          math.max(1, math.ceil((floor - now) * 1000)))
      end
    end
  end
end

-- Settle partition part's settlements, ARGV[first .. last] (8 entries each), into res.
local function settle_partition(part, first, last, res)
  local b = 6 * (part - 1)
  local ready, retry, succeeded, dead, prefix = KEYS[b + 1], KEYS[b + 3], KEYS[b + 4],
    KEYS[b + 5], KEYS[b + 6]
  local aside = new_aside()
  res[1] = aside
  local settled = {}
  local slot_memo, gone = {}, {}
  for i = first, last, 8 do
    local id = ARGV[i]
    local key = prefix .. id
    local f = redis.pcall('HMGET', key, 'v', 'state', 'lease_token', 'lease_expires_at',
      'attempts', 'run_at', 'w', 'x')
    if not f[2] then f = probe_job(key, f, 8) end
    -- an upper-case kind: the job has flow control, its field fc is read
    -- (the others are spared an absent-field lookup)
    local kind = ARGV[i + 2]
    if string.byte(kind) < 97 then  -- below 'a': upper case
      kind = string.lower(kind)
      if f then f[9] = redis.call('HGET', key, 'fc') end
    end
    -- a success whose record is written compactly if it is kept a while
    -- (the store's compact_succeeded; see lib/succeed_record.lua)
    local compact = false
    if kind == 'k' then kind, compact = 's', true end
    -- a success that hands its successor over: its entries, whatever follows
    local succ
    if kind == 'c' then
      kind, succ, succ_next = 's', succ_next, succ_next + 17
    end
    -- judge the record (nothing here can fail) ...
    local p, w, ours = judge_lease(f, ARGV[i + 1], now)
    if ours and not w then
      -- what the outcome reads or overwrites, judged as every path judges it
      -- (store/_record_rules.py): no damaged value is rewritten into a sound one
      if kind == 'l' or kind == 'f' or kind == 'u' then
        w = check_count('attempts', f[5]) or check_number('run_at', f[6])
      elseif kind == 'r' then
        w = check_number('run_at', f[6])
      end
      if w then p = 2 end
    end
    -- ... then write what it decides
    if p == 3 then
      newer(aside, id, w)
    elseif p == 2 then
      settled[#settled + 1] = id
      dead_letter(aside, key, id, dead, w, now, now_s)  -- (notifies)
    elseif p == 1 then
      settled[#settled + 1] = id
      -- every outcome ends the lease: its concurrency slots are free at once
      if f[9] then release_slots(prefix, id, f[9], slot_memo, gone) end
      if (kind == 'r' or kind == 'l' or kind == 'f' or kind == 'u')
          and redis.call('HEXISTS', key, 'ab') == 1 then
        kind = 'a'  -- an abort was asked while it ran: it does not run again
      end
      -- every other outcome adds the attempt it ends to the job's history
      -- (add_attempt: the attempt count f[5] and its start ARGV[i + 7])
      if kind == 's' then
        local retain = num(ARGV[i + 5])
        local flow = continues(f[8])
        if flow and retain < WORKFLOW_KEEP then
          -- a workflow job's record is kept, so its continuation's IDs stay taken
          retain = WORKFLOW_KEEP
        end
        local ttl = num(ARGV[i + 7])
        if retain > 0 or ttl or f[7] then
          -- retained for inspection: listed and counted, trimmed by the
          -- janitor; else kept only for its result, or for its waiters to read
          -- the outcome after their wake-up: no index entry, the record
          -- expires by itself. Compact (a listpack) when the store asks and
          -- it is kept a while: not for the minute of its waiters alone,
          -- where that would cost more than it saves.
          local expire_ms = retain <= 0 and math.ceil((ttl or WAITED_KEEP) * 1000) or nil
          succeed_record(key, now_s, ttl and ARGV[i + 6], ttl and later_s(ttl), expire_ms,
            compact and (retain > 0 or ttl), f[7], f[8])
          if retain > 0 then
            local keep = retain
            if ttl and ttl > keep then keep = ttl end
            redis.call('ZADD', succeeded, later_s(keep), id)
          end
        else
          redis.call('DEL', key)
        end
        unique_finished(prefix, id, f[8], true)
        local stored = flow and succ and continue_chain(succ)
        if stored then
          p = stored  -- its successor is stored (7), or leased to us (8): no outbox entry
        elseif flow and not nothing_follows(f[8]) then
          -- its continuation goes to the outbox in this same step (the record
          -- first); one that asks for nothing (a flow's last step) needs none
          redis.call('ZADD', outbox_key(prefix), now, id)
          p = 4
        end
        notify_done(key, f[7])
      elseif kind == 'r' then
        local due = now + math.max(0, tonumber(ARGV[i + 4]))
        add_attempt(key, 'retried', f[5], ARGV[i + 7], now_s, ARGV[i + 3])
        redis.call('ZADD', retry, due, id)
        redis.call('HSET', key, 'state', 'retry_wait', 'run_at', due, 'last_error', ARGV[i + 3],
          'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
        redis.call('HDEL', key, 'uc')  -- it ran: no longer unclaimed
      elseif kind == 'd' then
        add_attempt(key, 'dead', f[5], ARGV[i + 7], now_s, ARGV[i + 3])
        redis.call('ZADD', dead, now, id)
        redis.call('HSET', key, 'state', 'dead', 'last_error', ARGV[i + 3], 'finished_at', now_s,
          'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
        unique_finished(prefix, id, f[8], false)
        notify_done(key, f[7])
        if fails(f[8]) then
          -- a workflow job with failure handling: to the outbox in this same step
          redis.call('ZADD', outbox_key(prefix), now, id)
          p = 4
        end
      elseif kind == 'x' then
        if fails(f[8]) then
          -- a workflow job with failure handling: failed in its flow, this step
          keep_discarded_place(prefix, key, id, f[8], f[5], ARGV[i + 3], now)
          p = 4
        end
        if f[7] then
          add_attempt(key, 'discarded', f[5], ARGV[i + 7], now_s, ARGV[i + 3])
          redis.call('HSET', key, 'state', 'dead', 'last_error', ARGV[i + 3], 'finished_at',
            now_s, 'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
          redis.call('PEXPIRE', key, WAITED_KEEP * 1000)
        else
          redis.call('DEL', key)
        end
        unique_finished(prefix, id, f[8], false)
        notify_done(key, f[7])
      elseif kind == 'a' then
        local text = redis.call('HGET', key, 'ab') or ARGV[i + 3]
        add_attempt(key, 'aborted', f[5], ARGV[i + 7], now_s, text)
        abort_job(prefix, key, id, dead, text, now, now_s, f[8], f[7])
        p = 5
      elseif kind == 'f' then
        -- deferred (the handler was rate limited upstream): retry_wait, the
        -- attempt given back, and the job's rate limits held back as long
        local delay = math.max(0, tonumber(ARGV[i + 4]))
        local due = now + delay
        add_attempt(key, 'deferred', f[5], ARGV[i + 7], now_s, ARGV[i + 3])
        redis.call('ZADD', retry, due, id)
        redis.call('HSET', key, 'state', 'retry_wait', 'run_at', due, 'last_error', ARGV[i + 3],
          'attempts', math.max(0, tonumber(f[5]) - 1),
          'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
        redis.call('HDEL', key, 'uc')  -- a worker with its handler took it
        hold_back(prefix, f[9], due)
      elseif kind == 'u' then
        local since = unclaimed_since(redis.call('HGET', key, 'uc'))
        local since_s = since and string.format('%.17g', since) or now_s
        local attempts = math.max(0, tonumber(f[5]) - 1)
        add_attempt(key, 'unclaimed', f[5], ARGV[i + 7], now_s, ARGV[i + 3])
        if now - (since or now) >= tonumber(ARGV[i + 5]) then
          redis.call('ZADD', dead, now, id)
          redis.call('HSET', key, 'state', 'dead', 'last_error', ARGV[i + 3],
            'finished_at', now_s, 'attempts', attempts, 'uc', since_s,
            'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
          unique_finished(prefix, id, f[8], false)
          notify_done(key, f[7])
          p = 6
        else
          local due = now + math.max(0, tonumber(ARGV[i + 4]))
          redis.call('ZADD', retry, due, id)
          redis.call('HSET', key, 'state', 'retry_wait', 'run_at', due, 'attempts', attempts,
            'uc', since_s, 'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
        end
      else
        -- release: back to ready at once, keeping its due time; the attempt is given back
        add_attempt(key, 'released', f[5], ARGV[i + 7], now_s, '')
        redis.call('ZADD', ready, ready_score(f[6], f[9]), id)
        redis.call('HSET', key, 'state', 'ready', 'attempts', math.max(0, tonumber(f[5]) - 1),
          'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      end
    end
    res[#res + 1] = p
  end
  -- one ZREM for the batch (chunked below Lua's unpack() limit)
  zrem_all(KEYS[b + 2], settled)
  if #settled > 0 then drop_idle_leased(KEYS[b + 2]) end
  -- after the codes: how many concurrency slots were given back that a lease
  -- had found taken (see give_back_slots)
  res[#res + 1] = give_back_slots(gone, prefix)
end

local out = {now_s}
local first = parts + 1
-- the successors follow the settlements: the first partition's first
local succ_at = first
for p = 1, parts do
  succ_at = succ_at + 8 * tonumber(ARGV[p])
end
-- whether any follow (a batch without chain links skips their bookkeeping)
local successors = succ_at <= #ARGV
for p = 1, parts do
  local last = first + 8 * tonumber(ARGV[p]) - 1
  local res = {}
  succ_next = succ_at
  -- A failing write (a key of the wrong type) stops only this partition,
  -- as if each partition had a script of its own.
  local ok, err = pcall(settle_partition, p, first, last, res)
  -- the next partition's successors start after this one's, wherever it stopped
  if successors then
    for i = first + 2, last, 8 do
      if ARGV[i] == 'c' or ARGV[i] == 'C' then succ_at = succ_at + 17 end
    end
  end
  if ok then
    out[p + 1] = res
  else
    out[p + 1] = type(err) == 'table' and tostring(err.err) or tostring(err)
  end
  first = last + 1
end
return out
