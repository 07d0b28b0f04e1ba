-- _prelude.lua: helpers every job script starts with. _scripts.py prepends
-- "local FORMAT, CHUNK, CHUNKED_MAX = <RECORD_FORMAT>, <PAYLOAD_CHUNK>,
-- <CHUNKED_PAYLOAD_MAX>" and "local LEASED_SENTINEL = '<the leased zsets'
-- sentinel member, keys.LEASED_SENTINEL>'" and this file to each script when
-- it loads it, so these are defined once, in Python. Reads no KEYS or ARGV.
--
-- The rules every script keeps (so one damaged record never costs another job):
-- * Nothing here raises on what a key holds: job hashes are read with
--   redis.pcall (a key of the wrong type is an error reply, not an abort) and
--   every field is checked (check_*) before it is used.
-- * Nothing a script does to judge a record can fail, and each record is
--   judged before anything is written for it: Redis does not undo a script's
--   writes when it fails later, so a check that could fail must never follow
--   a write. Scripts that take a batch (lease pops it; recover, promote and
--   the admin scripts read it) judge all of it, then write; settle and renew
--   write each record right after judging it.
-- * An index or other key of the partition that holds the wrong type fails
--   the script before anything is written: lease, recover and promote check
--   the keys they write (wrong_type) before their first write; settle, renew
--   and dead_letter write the index before the record, so a failing index
--   write leaves that record as it was. The client then skips that partition
--   and keeps what the others did. A script over several partitions (lease,
--   promote, settle on a single node) keeps that per partition: lease checks
--   each partition's keys before its first write there, promote and settle
--   run each partition in a pcall, so a failure stops only its partition.
-- * A record whose field the script needs is missing, empty or unreadable is
--   dead-lettered (dead_letter): state dead, last_error "damaged record: ...",
--   finished_at now, lease cleared, in the partition's dead index.
-- * An index entry with no job hash behind it (or a key that is not a hash)
--   leaves the index and is listed in the partition's quarantine hash
--   (quarantine), field = job id, value = JSON {reason, at, index}.
-- * A record whose format field v is above FORMAT (a newer version wrote it)
--   is left exactly as it is and reported.
-- Each script returns what it set aside as
-- {dead: per job the id then the 13 JOB_FIELDS as stored afterwards,
--  quarantined: per entry the id then the reason, newer: per record the id then v}.

local find, HUGE, FORMAT_S = string.find, math.huge, tostring(FORMAT)
local JOB_FIELDS = {'kind', 'payload', 'run_at', 'state', 'attempts', 'max_retries', 'timeout',
  'lease_token', 'lease_owner', 'lease_expires_at', 'last_error', 'created_at', 'finished_at'}
-- Format 2 may store a payload (enqueue.lua: a delayed job's, of more than
-- CHUNK bytes and at most CHUNKED_MAX) in chunks: its first CHUNK bytes in
-- payload, the rest CHUNK bytes a field in p1 .. p<n>, and n in pn (see
-- RECORD_FORMAT in _codec.py), so every value fits Redis's compact listpack
-- encoding of small hashes.
local MAX_CHUNKS = CHUNKED_MAX / CHUNK - 1
local JOB_READ = {unpack(JOB_FIELDS)}
JOB_READ[14] = 'pn'

-- A stored value as the Python side shows bytes: b'...', printable ASCII as
-- is, anything else escaped, cut after 40 bytes (the same text as _codec.show).
local function show(v)
  local s, tail = v, ''
  if #s > 40 then
    s, tail = string.sub(s, 1, 40), '... (' .. #v .. ' bytes)'
  end
  s = string.gsub(s, "[%c\\'\128-\255]", function(c)
    if c == '\\' then return '\\\\' end
    if c == "'" then return "\\'" end
    if c == '\n' then return '\\n' end
    if c == '\r' then return '\\r' end
    if c == '\t' then return '\\t' end
    return string.format('\\x%02x', string.byte(c))
  end)
  return "b'" .. s .. "'" .. tail
end

local function missing(name, v)
  if v == false or v == nil then return "field '" .. name .. "' is missing" end
  return "field '" .. name .. "' is empty"
end

-- Whether v is a count as check_count accepts it (the hot loops' cheap test).
local function is_count(v)
  return v and #v <= 15 and find(v, '^%d+$') ~= nil
end

-- nil when v is a non-negative integer in decimal digits (at most 15), else why not.
local function check_count(name, v)
  if not v or v == '' then return missing(name, v) end
  if #v > 15 or not find(v, '^%d+$') then
    return "field '" .. name .. "' holds " .. show(v) .. ', not an integer >= 0'
  end
  return nil
end

-- nil and the number when v is a finite number, else why not: the texts
-- store/_record_rules.py's parse_number reads (tonumber also reads
-- hexadecimal, which Python's float() refuses: not a number here either).
local function check_number(name, v)
  local x = tonumber(v)
  if x and x == x and x ~= HUGE and x ~= -HUGE and not find(v, '[xX]') then return nil, x end
  if not v or v == '' then return missing(name, v) end
  return "field '" .. name .. "' holds " .. show(v) .. ', not a number'
end

local function check_text(name, v)
  if not v or v == '' then return missing(name, v) end
  return nil
end

-- The record format of field v: nil = readable by this version (v absent
-- means format 1, written before formats were recorded), 'newer', or why v is
-- unreadable.
local function check_format(v)
  if not v or v == FORMAT_S then return nil end
  if #v <= 9 and find(v, '^%d+$') then
    local n = tonumber(v)
    if n > FORMAT then return 'newer' end
    if n >= 1 then return nil end
  end
  return "field 'v' holds " .. show(v) .. ', not a record format'
end

-- nil when v names a job state (records/_jobs.py JobState), else why not.
local function check_job_state(v)
  if v == 'ready' or v == 'leased' or v == 'scheduled' or v == 'retry_wait'
      or v == 'succeeded' or v == 'dead' or v == 'aborted' then
    return nil
  end
  if not v or v == '' then return missing('state', v) end
  return "field 'state' holds " .. show(v) .. ', not a job state'
end

-- The state check: nil when the record says it is in the index it was found in.
local function check_state(v, expected, index)
  if not v or v == '' then return missing('state', v) end
  if v ~= expected then
    return "field 'state' holds " .. show(v) .. ', but the job is in the ' .. index .. ' index'
  end
  return nil
end

-- The slow path of reading a job hash whose HMGET reply f (n fields) lacks
-- the field every record has: f, or nil and why there is no job hash to
-- read (no key at all, or a key of another type).
local function probe_job(key, f, n)
  if f.err then
    local t = redis.pcall('TYPE', key)
    return nil, 'its key holds a ' .. tostring(t.ok or '?') .. ', not a job hash'
  end
  for i = 1, n do
    if f[i] then return f, nil end
  end
  -- every field asked for is absent: no record, or one missing all of them
  if redis.call('EXISTS', key) == 0 then return nil, 'no record' end
  return f, nil
end

-- HMGET a job hash: the values, or nil and why there is no job hash to read.
-- The fields asked for start with 'v', 'state' (every record has a state:
-- the fast path; hot loops inline this with a field of their own).
local function read_job(key, ...)
  local f = redis.pcall('HMGET', key, ...)
  if f[2] then return f, nil end
  return probe_job(key, f, select('#', ...))
end

-- The payload of the job hash at key (a hash: the caller has read it) from
-- its payload and pn fields: the payload, or nil and why it cannot be joined
-- (the same texts as join_payload in _codec.py).
local function join_payload(key, first, pn)
  if not pn then return first, nil end
  local n = tonumber(pn)
  if #pn > 2 or not find(pn, '^%d+$') or n < 1 or n > MAX_CHUNKS then
    return nil, "field 'pn' holds " .. show(pn) .. ', not a payload chunk count'
  end
  if not first then return nil, missing('payload', first) end
  local names = {}
  for k = 1, n do names[k] = 'p' .. k end
  local c = redis.call('HMGET', key, unpack(names))
  for k = 1, n do
    if not c[k] then return nil, "field 'p" .. k .. "' is missing" end
  end
  return first .. table.concat(c), nil
end

-- The 13 JOB_FIELDS of the job hash at key as stored, the payload joined
-- (false when its chunks cannot be joined).
local function job_fields(key)
  local g = redis.call('HMGET', key, unpack(JOB_READ))
  if g[14] then g[2] = join_payload(key, g[2], g[14]) or false end
  g[14] = nil
  return g
end

-- What the store checker reads of the job hash at key (check_inspect.lua,
-- check_repair.lua): INSPECTED values, the 13 JOB_FIELDS, v, h, fc and
-- result_until (every field a record is judged by, store/_record_rules.py;
-- _check.py's FIELDS), the payload joined (false when it cannot be), then
-- why its chunks cannot be joined (false: they can).
local INSPECTED = 18
local function inspect_fields(key)
  local f = redis.call('HMGET', key, 'kind', 'payload', 'run_at', 'state', 'attempts',
    'max_retries', 'timeout', 'lease_token', 'lease_owner', 'lease_expires_at',
    'last_error', 'created_at', 'finished_at', 'v', 'h', 'fc', 'result_until', 'pn')
  local why = false
  if f[INSPECTED] then
    local joined, bad = join_payload(key, f[2], f[INSPECTED])
    f[2], why = joined or false, bad or false
  end
  f[INSPECTED] = why
  return f
end

-- The unique lock of key u in the partition whose job key prefix is prefix
-- (keys.py: <tag>:u:<key> beside <tag>:j:<id>). Its value is the mode's
-- letter (l lock, t throttle, d debounce) then the holder's ID.
local function lock_key(prefix, u)
  return string.sub(prefix, 1, -3) .. 'u:' .. u
end

-- A job's extras, as enqueue.lua takes them and its record keeps them in
-- field x: its unique spec, a NUL byte, its workflow continuation (either
-- may be empty). The unique spec: mode letter, lock ttl in ms (none: no
-- digits), '|', key. unique_spec returns key, mode, ttl (a number or nil);
-- nil for none (or a damaged x).
local function unique_spec(x)
  if not x then return nil end
  local mode, ttl, key = string.match(x, '^([ltd])(%d*)|([^%z]+)%z')
  return key, mode, tonumber(ttl)
end

-- Whether extras x carry a workflow continuation.
local function continues(x)
  if not x then return false end
  local z = string.find(x, '\0', 1, true)
  return z ~= nil and z < #x
end

-- The outbox of the partition whose job key prefix is prefix: a zset of
-- workflow jobs that succeeded (score: when), drained by the continuer.
local function outbox_key(prefix)
  return string.sub(prefix, 1, -3) .. 'outbox'
end

-- The aborted marks of the partition whose job key prefix is prefix: a zset
-- of the aborted jobs among the dead index's entries (an aborted job is kept
-- there, like a dead one), score its finished_at as in the dead index, so
-- they are counted and listed without reading every dead record. A mark
-- counts only while the dead index holds its job with the same score: one
-- whose job was trimmed or deleted since is stale (marks older than the
-- oldest dead entry are dropped by trim.lua and with the next abort).
local function aborted_key(prefix)
  return string.sub(prefix, 1, -3) .. 'aborted'
end

-- Drop the aborted marks older than the oldest entry of dead_zset (their jobs
-- were trimmed): all of them when it is empty. With pcall: never fails.
local function prune_aborted(prefix, dead_zset)
  local oldest = redis.call('ZRANGE', dead_zset, 0, 0, 'WITHSCORES')
  if oldest[2] then
    redis.pcall('ZREMRANGEBYSCORE', aborted_key(prefix), '-inf', '(' .. oldest[2])
  else
    redis.pcall('DEL', aborted_key(prefix))
  end
end

-- The job id finished (succeeded: ok true; dead or deleted: false): a
-- throttle's lock it holds starts its ttl, any other lock it holds is
-- released. A lock another job holds (or none) is left as it is. x: the
-- record's field x.
local function unique_finished(prefix, id, x, ok)
  local key, mode, ttl = unique_spec(x)
  if not key then return end
  local lock = lock_key(prefix, key)
  if redis.pcall('GET', lock) ~= mode .. id then return end
  if ok and mode == 't' and ttl then
    redis.call('PEXPIRE', lock, math.max(1, ttl))
  else
    redis.call('DEL', lock)
  end
end

-- Why one of the keys a script writes holds another type ('zset' or 'hash'
-- expected; 'none' is fine), or nil. A script checks before its first
-- write, so a key of the wrong type fails it while nothing is written yet.
-- pairs: key, type, key, type, ...
local function wrong_type(...)
  local n = select('#', ...)
  for i = 1, n, 2 do
    local key, want = select(i, ...)
    local t = redis.call('TYPE', key).ok
    if t ~= want and t ~= 'none' then
      return 'key ' .. key .. ' holds a ' .. t .. ', not a ' .. want .. ': nothing done'
    end
  end
  return nil
end

local function new_aside() return {{}, {}, {}} end

-- Wake the producers waiting on this job's outcome: a waiter names its
-- process's channel in field 'w' (watch.lua) before it blocks, so a job
-- nobody waits on publishes nothing. The message is the job's key.
local function notify_done(key, w)
  if w then redis.call('PUBLISH', w, key) end
end

-- Dead-letter a damaged record (the caller removes it from the index it was
-- found in) and report it with its fields as now stored. Dead, it gives its
-- unique key back (when its field x still names it) like any dead job.
local function dead_letter(aside, key, id, dead_zset, reason, now, now_s)
  redis.call('ZADD', dead_zset, now, id)  -- the index first: see wrong_type
  redis.call('HSET', key, 'state', 'dead', 'last_error', 'damaged record: ' .. reason,
    'finished_at', now_s, 'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  unique_finished(string.sub(key, 1, #key - #id), id, redis.call('HGET', key, 'x'), false)
  local d = aside[1]
  d[#d + 1] = id
  local g = job_fields(key)
  for k = 1, 13 do d[#d + 1] = g[k] end
  notify_done(key, redis.call('HGET', key, 'w'))
end

-- Abort the job id of the job hash key (the caller judged it; f_x and f_w are
-- its fields x and w): into the dead index (score now) and the aborted marks,
-- then state aborted with last_error text and its finish time, the lease
-- cleared, its unique key released and its waiters woken. The marks are
-- written with pcall: a mark is a hint, and never fails the script.
local function abort_job(prefix, key, id, dead_zset, text, now, now_s, f_x, f_w)
  redis.call('ZADD', dead_zset, now, id)  -- the index first: see wrong_type
  redis.pcall('ZADD', aborted_key(prefix), now, id)
  prune_aborted(prefix, dead_zset)
  redis.call('HSET', key, 'state', 'aborted', 'last_error', text, 'finished_at', now_s,
    'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  unique_finished(prefix, id, f_x, false)
  notify_done(key, f_w)
end

-- Record an index entry without a usable job hash (the caller removes the entry).
local function quarantine(aside, damaged_hash, id, reason, index, now)
  redis.call('HSET', damaged_hash, id, cjson.encode({reason = reason, at = now, index = index}))
  local q = aside[2]
  q[#q + 1] = id
  q[#q + 1] = reason
end

local function newer(aside, id, v)
  local n = aside[3]
  n[#n + 1] = id
  n[#n + 1] = v
end

-- ZREM ids (a list) from zset, in chunks below Lua's unpack() limit.
local function zrem_all(zset, ids)
  for c = 1, #ids, 1000 do
    redis.call('ZREM', zset, unpack(ids, c, math.min(c + 999, #ids)))
  end
end

-- Of nsrc sorted sources (zsets, or due prefixes of them), how many of the
-- n earliest entries by score each holds: the share of each source in one
-- order by score across them. Entries of equal score in several sources are
-- taken source by source (the order among them is not the ID order).
-- head(s, r): the score of source s's entry at rank r (0-based), as Redis
-- wrote it (a string), or nil when it has none; upto(s, x): how many of its
-- entries have a score <= x (a score as head gave it; nil: any score).
-- No entry is read but a few heads; the rest is counted (ZCOUNT): each step
-- takes, from every source, all entries up to a bound, when that many are
-- still wanted (the bound: the source with the lowest head, a fair share
-- of entries on), else what the lowest source holds up to the next
-- source's head. So a batch enqueued at one due time costs a count per
-- source it comes from, and entries of many due times a few rounds of
-- counts. Scores are compared as read first: Redis writes equal scores
-- alike, so only unequal ones are converted to numbers (tonumber is costly).
-- Returns took (per source).
local function earliest(nsrc, n, head, upto)
  local took, hs, hn = {}, {}, {}
  local function number(s)
    local x = hn[s]
    if not x then
      x = tonumber(hs[s])
      hn[s] = x
    end
    return x
  end
  local function below(a, b)  -- whether a's head is lower than b's
    return hs[a] ~= hs[b] and number(a) < number(b)
  end
  for s = 1, nsrc do
    took[s] = 0
    hs[s] = head(s, 0)
  end
  local remaining = n
  while remaining > 0 do
    -- the source with the lowest head (the first of equals), and the next
    local best, second, live = nil, nil, 0
    for s = 1, nsrc do
      if hs[s] then
        live = live + 1
        if not best then
          best = s
        elseif below(s, best) then
          best, second = s, best
        elseif not second or below(s, second) then
          second = s
        end
      end
    end
    if not best then break end
    local gave = false
    -- all sources up to a bound, when that is no more than wanted
    local k = math.floor(0.8 * remaining / live)
    if second and k >= 2 then
      local bound = head(best, took[best] + k - 1)
      if bound and bound ~= hs[best] then
        local counts, total = {}, 0
        for s = 1, nsrc do
          if hs[s] then
            counts[s] = upto(s, bound) - took[s]
            total = total + counts[s]
          end
        end
        if total <= remaining then
          for s, c in pairs(counts) do
            if c > 0 then
              took[s] = took[s] + c
              hs[s], hn[s] = head(s, took[s]), nil
            end
          end
          remaining = remaining - total
          gave = true
        end
      end
    end
    if not gave then
      -- the lowest source, up to the next source's head
      local give = remaining
      if second then give = math.max(1, upto(best, hs[second]) - took[best]) end
      if give > remaining then give = remaining end
      took[best] = took[best] + give
      remaining = remaining - give
      if remaining > 0 then
        hs[best], hn[best] = head(best, took[best]), nil
      end
    end
  end
  return took
end

-- Delete the leased zset of a partition when it holds nothing but the
-- sentinel (LEASED_SENTINEL, see lease.lua): no lease is left there. An idle
-- partition then has no leased key at all, so recovery's peek
-- (recover_peek.lua) tells that no partition holds a lease with one EXISTS
-- over all of them; lease.lua writes the sentinel again, first, with the
-- next lease it records. One ZCARD, and a ZSCORE when one member is left.
local function drop_idle_leased(leased)
  if redis.call('ZCARD', leased) == 1 and redis.call('ZSCORE', leased, LEASED_SENTINEL) then
    redis.call('DEL', leased)
  end
end

-- Flow control (records/_control.py): a job's field fc, items separated by
-- newlines: p<priority> (first when present), c<limit>/<key> per
-- concurrency limit, r<count>/<per s>/<burst>/<key> per rate limit,
-- e<epoch s> its expiry. A limit's state lives beside the job, in its
-- partition's slot: <tag>:rl:<key> (string: the GCRA's theoretical arrival
-- time) and <tag>:cap:<key> (zset: holder id, score = its lease expiry).
-- One priority level moves a ready score this many seconds earlier (more
-- than any due time spans): ready jobs order by priority, then due time.
local PRIO_STEP = 1e10

local function priority_of(fc)
  if not fc then return 0 end
  return tonumber(string.match(fc, '^p(%-?%d+)')) or 0
end

-- The ready score of a job due at run_at (as stored, or a number) with flow
-- control fc: run_at itself at priority 0.
local function ready_score(run_at, fc)
  local p = priority_of(fc)
  if p == 0 then return run_at end
  return string.format('%.17g', tonumber(run_at) - p * PRIO_STEP)
end

-- The key of limit kind ('rl' or 'cap') named key, beside the job key prefix.
local function limit_key(prefix, kind, key)
  return string.sub(prefix, 1, -3) .. kind .. ':' .. key
end

-- The concurrency limit zsets of flow control fc beside the job key prefix
-- (a list; memo caches them per fc text for a batch).
local function slot_keys(prefix, fc, memo)
  local got = memo[fc]
  if got then return got end
  got = {}
  for item in string.gmatch(fc, '[^\n]+') do
    local key = string.match(item, '^c%d+/(.+)$')
    if key then got[#got + 1] = limit_key(prefix, 'cap', key) end
  end
  memo[fc] = got
  return got
end

-- Queue job id's concurrency slots (flow control fc) to be given back by
-- give_back_slots: into gone (zset key -> ids), one ZREM per zset per batch.
local function release_slots(prefix, id, fc, memo, gone)
  for _, k in ipairs(slot_keys(prefix, fc, memo)) do
    local ids = gone[k]
    if not ids then
      ids = {}
      gone[k] = ids
    end
    ids[#ids + 1] = id
  end
end

-- The set of the concurrency limits (their zset keys) a lease held a job back
-- for, beside the job key prefix: a settle that frees one of their slots wakes
-- idle leasers, and only then (a unique job frees its key's run slot with
-- every settle: most of those no job waits for).
local function waiting_key(prefix)
  return string.sub(prefix, 1, -3) .. 'waiting'
end

-- Give back the slots release_slots queued; how many of them freed a limit
-- that a lease held a job back for (each such limit leaves the waiting set:
-- the lease that finds it taken again puts it back).
local function give_back_slots(gone, prefix)
  local freed = 0
  local waiting = waiting_key(prefix)
  for k, ids in pairs(gone) do
    local n = 0
    for c = 1, #ids, 1000 do
      -- pcall: a key of another type holds no slot (lease replaces it), and
      -- must not stop a settle after its writes
      local got = redis.pcall('ZREM', k, unpack(ids, c, math.min(c + 999, #ids)))
      if type(got) == 'number' then n = n + got end
    end
    if n > 0 and redis.pcall('SREM', waiting, k) == 1 then freed = freed + n end
  end
  return freed
end
