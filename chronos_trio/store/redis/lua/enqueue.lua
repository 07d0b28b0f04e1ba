-- enqueue.lua: store new jobs in ONE partition; a job whose ID exists is left untouched.
--
-- KEYS[1]  scheduled zset of the partition (score = run_at)
-- KEYS[2]  ready zset of the partition (score = run_at)
-- KEYS[3]  "closed" marker of the partition (set once its version was completed)
-- KEYS[4]  job key prefix of the partition ('<tag>:j:'): the job hash of ID x
--          is KEYS[4]..x. The keys a unique job needs are derived from it
--          (lib/enqueue_head.lua's beside), each of the same hash tag, so
--          of the same slot: the unique lock of key k, <tag>:u:k, and the
--          retry_wait zset <tag>:retry (a debounce may move a job from it)
-- ARGV[1]  batch now in epoch seconds, or '' to use this script's TIME. The client
--          passes one TIME reading when a batch spans partitions, so delay-based
--          due times of one batch agree across partitions.
-- ARGV[2+9i .. 10+9i], per job i: id, kind, payload (raw bytes),
--          run_at ('' = now + delay), delay, max_retries, timeout, headers
--          (a JSON object, stored as field h; '' for none: no field), extras
--          ('' for an ordinary job, else: for a job stored marked as waited
--          on (keep_outcome), a 0x02 byte, the byte length of the done
--          channel, ':' and the channel (stored as field w, as watch.lua
--          writes it); then its flow control and a 0x01 byte
--          when it has one (stored as field fc, a relative expiry E<s> made
--          e<now + s>, see lib/ready_score.lua), then its unique spec and workflow
--          continuation, see lib/unique_spec.lua; stored as field x)
--
-- Every stored job's zset entry is added after its record, gathered with
-- others into one ZADD per zset (see lib/enqueue_head.lua). A call of
-- several jobs checks first that neither zset holds another type: one that
-- does fails it before anything is written.
--
-- A unique job (see Unique in records/_unique.py) meets the lock of its key:
-- held by a pending job (or a throttle's, within its ttl), it stores nothing
-- and reports the holder; a debounce replaces a waiting holder's payload,
-- headers and due time instead. Otherwise it is stored and takes the lock,
-- in this same step.
--
-- Each job hash gets v = FORMAT, the record format (see README.md), and the
-- payload of a delayed job, when of more than CHUNK bytes (at most
-- CHUNKED_MAX), is stored in chunks. An
-- existing key under a job's ID is never touched, whatever it holds (a
-- damaged record, one of a newer format, a key of another type).
--
-- Returns {'closed'} when the partition was closed (the client re-reads the
-- topology and routes the jobs again), else {now, created_1, run_at_1, id_1,
-- ...} with created = 1 (stored) or 0 (the ID existed, or the unique key was
-- held: id is then the holder's; run_at is the existing one, '' when that
-- key holds no readable due time; for a debounce the new one).
--@include enqueue_head
--@include check_format
--@include check_number
--@include chunk_sizes
--@include chunks
--@include find
--@include format
--@include ready_score
--@include unique_spec
--@include write_record
local last = #ARGV
-- One job: one look tells whether the partition is closed or its ID exists
-- (the usual answer, neither, costs one call)
local single_new = last == 10 and redis.call('EXISTS', KEYS[3], KEYS[4] .. ARGV[2]) == 0
if not single_new and redis.call('EXISTS', KEYS[3]) == 1 then
  return {'closed'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
-- Numbers are formatted once here, not per job: the common due times (now,
-- or a given run_at) are stored and returned as the very strings received.
local now_s = string.format('%.17g', now)
local base, base_s = now, now_s
if ARGV[1] ~= '' then
  base, base_s = tonumber(ARGV[1]), ARGV[1]
end
local scheduled, ready, prefix = KEYS[1], KEYS[2], KEYS[4]
local sub = string.sub

-- What only a job with extras or a chunked payload needs (a plain job
-- never does), made by the first such job: the partition's unique lock
-- prefix (the lock of key k is locks..k), the states of a pending job, the
-- zset of each state in which a debounce replaces the holder's payload and
-- due time, and the functions payload_fields and claim (see where they are
-- made).
local locks, PENDING, WAITING, payload_fields, claim

-- Every stored job's zset entry is gathered (index_later) and added with
-- others by one ZADD per zset, after their records: at the end, and before
-- a debounce's ZREM (the one step that reads a zset a job of this call may
-- be in). A call of several jobs checks first that neither zset holds
-- another type, so that one that does fails the call before anything is
-- written (a single job's ZADD follows its HSET).
if last > 10 then
  for _, zset in ipairs({ready, scheduled}) do
    local kind = redis.call('TYPE', zset).ok
    if kind ~= 'zset' and kind ~= 'none' then
      return redis.error_reply('WRONGTYPE key ' .. zset .. ' holds a ' .. kind
        .. ', not a zset: nothing done')
    end
  end
end
-- the entries gathered, per zset (see lib/enqueue_head.lua's index_later)
local pending = {}

-- a local: the loop reads it often, a global costs more to reach
local argv = ARGV
local out = {now_s}
local n = 1
for i = 2, last, 9 do
  local id = argv[i]
  local key = prefix .. id
  -- EXISTS, not HGET run_at: a damaged record without run_at (or a key of
  -- another type, on which HGET would fail the script) exists too
  if not single_new and redis.call('EXISTS', key) == 1 then
    local existing = redis.pcall('HGET', key, 'run_at')
    if type(existing) ~= 'string' or check_number('run_at', existing) then existing = '' end
    out[n + 1] = 0
    out[n + 2] = existing
    out[n + 3] = id
  else
    local run_at, run_at_s
    if argv[i + 3] ~= '' then
      run_at_s = argv[i + 3]
      run_at = tonumber(run_at_s)
    else
      local delay = tonumber(argv[i + 4])
      if delay > 0 then
        run_at = base + delay
        run_at_s = string.format('%.17g', run_at)
      else
        run_at, run_at_s = base, base_s
      end
    end
    local state, zset = 'scheduled', scheduled
    if run_at <= now then
      state, zset = 'ready', ready
    end
    local extras = argv[i + 8]
    -- Only a job that waits is chunked: memory matters for the schedule,
    -- while a job due now is leased within moments, and a compact hash
    -- costs Redis more CPU to build and read (about 23k and 29k more
    -- instructions per job for a 100-byte payload, enqueue and lease).
    local whole = zset == ready or #argv[i + 2] <= CHUNK
      or #argv[i + 2] > CHUNKED_MAX
    local verdict, holder, h, fc, lock, umode, ttl, waiter  -- verdict: see claim
    if extras ~= '' or not whole then
      if not claim then
        locks = beside(prefix, 'u:')
        PENDING = {scheduled = true, ready = true, leased = true, retry_wait = true}
        WAITING = {scheduled = scheduled, ready = ready, retry_wait = beside(prefix, 'retry')}
        -- The fields that store payload: whole, or in chunks.
        payload_fields = function(args, payload, whole)
          args[#args + 1] = 'payload'
          if whole then
            args[#args + 1] = payload
          else
            -- the first CHUNK bytes, then the rest CHUNK bytes a field in
            -- p1 .. p<n>, and n in pn (record format 2, see lib/chunks.lua)
            args[#args + 1] = sub(payload, 1, CHUNK)
            local a, n = #args, 0
            for start = CHUNK + 1, #payload, CHUNK do
              n = n + 1
              args[a + 1] = 'p' .. n
              args[a + 2] = sub(payload, start, start + CHUNK - 1)
              a = a + 2
            end
            args[a + 1] = 'pn'
            args[a + 2] = n
          end
          return args
        end
        -- What enqueueing a unique job (mode letter umode) does while its
        -- lock (key lock) holds held: nil (it is stored and takes the key),
        -- 'dup' (the holder keeps it) or 'replace' (a debounce of the
        -- waiting holder), and the holder's ID and fields state, v, run_at
        -- (for dup and replace).
        claim = function(lock, held, umode)
          if not held then return nil end
          local holder = sub(held, 2)
          local h = redis.pcall('HMGET', prefix .. holder, 'state', 'v', 'run_at')
          if h.err then h = {} end
          if not PENDING[h[1]] then
            -- a throttle's key stays taken for its ttl after the run (its
            -- success gave the lock that expiry). Any other lock whose job is
            -- gone or finished is stale, a throttle's without an expiry too:
            -- its job never succeeded, and was lost without giving the key
            -- back (a record deleted behind the store's back), so the key is
            -- never taken for good.
            if sub(held, 1, 1) == 't' and redis.call('PTTL', lock) > 0 then
              return 'dup', holder, h
            end
            return nil
          end
          if umode == 'd' then
            -- a holder that runs (not waiting): the new job runs after it
            if not WAITING[h[1]] then return nil end
            if check_format(h[2]) == nil then return 'replace', holder, h end
          end
          return 'dup', holder, h
        end
      end
      if string.byte(extras) == 2 then
        -- marked as waited on: the channel (a job that is stored keeps it
        -- as field w; a duplicate is left untouched)
        local len, at = string.match(extras, '^\2(%d+):()')
        len = tonumber(len)
        waiter, extras = sub(extras, at, at + len - 1), sub(extras, at + len)
      end
      if extras ~= '' then
        local sep = find(extras, '\1', 1, true)
        if sep then
          fc, extras = sub(extras, 1, sep - 1), sub(extras, sep + 1)
          local rel = string.match(fc, 'E([^\n]+)$')
          if rel then
            fc = sub(fc, 1, #fc - #rel - 1) .. 'e' .. string.format('%.17g', now + tonumber(rel))
          end
        end
        local ukey
        if extras ~= '' then ukey, umode, ttl = unique_spec(extras) end
        if ukey then
          lock = locks .. ukey
          local held = redis.pcall('GET', lock)
          if type(held) ~= 'string' then held = nil end
          verdict, holder, h = claim(lock, held, umode)
        end
      end
    end
    if not verdict then
      if whole then
        write_record(key, i, run_at_s, state, now_s)
      else
        -- one HSET with the chunks: a second call would cost more than the fields
        local args = payload_fields({'kind', argv[i + 1]}, argv[i + 2], false)
        local more = {'run_at', run_at_s, 'state', state, 'attempts', '0', 'max_retries',
          argv[i + 5], 'timeout', argv[i + 6], 'created_at', now_s, 'v', FORMAT_S}
        for k = 1, #more do args[#args + 1] = more[k] end
        redis.call('HSET', key, unpack(args))
        if argv[i + 7] ~= '' then redis.call('HSET', key, 'h', argv[i + 7]) end
      end
      if extras ~= '' then redis.call('HSET', key, 'x', extras) end
      if waiter then redis.call('HSET', key, 'w', waiter) end
      local score = run_at_s
      if fc then
        redis.call('HSET', key, 'fc', fc)
        if zset == ready then score = ready_score(run_at_s, fc) end
      end
      if lock then
        -- the lock is taken in this same step (a ttl lapses it; a throttle's
        -- starts when the job succeeds, see unique_finished)
        if ttl and umode ~= 't' then
          redis.call('SET', lock, umode .. id, 'PX', ttl)
        else
          redis.call('SET', lock, umode .. id)
        end
      end
      index_later(pending, zset, score, id)
      out[n + 1] = 1
      out[n + 2] = run_at_s
      out[n + 3] = id
    elseif verdict == 'dup' then
      local due = h[3]
      if type(due) ~= 'string' or check_number('run_at', due) then due = '' end
      out[n + 1] = 0
      out[n + 2] = due
      out[n + 3] = holder
    else
      -- the waiting holder takes this job's payload, headers and due time;
      -- the jobs before it are indexed first (it may be one of them)
      index_all(pending, ready, scheduled)
      local hkey = prefix .. holder
      redis.call('ZREM', WAITING[h[1]], holder)
      local pn = tonumber(redis.call('HGET', hkey, 'pn'))
      if pn and pn >= 1 and pn <= MAX_CHUNKS and pn % 1 == 0 then
        local gone = {'pn'}
        for k = 1, pn do gone[k + 1] = 'p' .. k end
        redis.call('HDEL', hkey, unpack(gone))
      end
      local args = payload_fields({}, argv[i + 2], whole)
      args[#args + 1] = 'run_at'
      args[#args + 1] = run_at_s
      args[#args + 1] = 'state'
      args[#args + 1] = state
      redis.call('HSET', hkey, unpack(args))
      if argv[i + 7] ~= '' then
        redis.call('HSET', hkey, 'h', argv[i + 7])
      else
        redis.call('HDEL', hkey, 'h')
      end
      local score = run_at_s
      if zset == ready then score = ready_score(run_at_s, redis.call('HGET', hkey, 'fc')) end
      redis.call('ZADD', zset, score, holder)
      out[n + 1] = 0
      out[n + 2] = run_at_s
      out[n + 3] = holder
    end
  end
  n = n + 3
end
index_all(pending, ready, scheduled)
return out
