local FORMAT, FORMAT_S = 2, '2'
-- string.find, read once (the checks call it in hot loops).
local find = string.find
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
-- math.huge, read once: the bound of a finite number.
local HUGE = math.huge
local function missing(name, v)
  if v == false or v == nil then return "field '" .. name .. "' is missing" end
  return "field '" .. name .. "' is empty"
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
local CHUNK, CHUNKED_MAX = 64, 6144
-- Format 2 may store a payload (enqueue.lua: a delayed job's, of more than
-- CHUNK bytes and at most CHUNKED_MAX) in chunks: its first CHUNK bytes in
-- payload, the rest CHUNK bytes a field in p1 .. p<n>, and n in pn (see
-- RECORD_FORMAT in _codec.py), so every value fits Redis's compact listpack
-- encoding of small hashes.
local MAX_CHUNKS = CHUNKED_MAX / CHUNK - 1
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
-- enqueue.lua: store new jobs in ONE partition; a job whose ID exists is left untouched.
--
-- KEYS[1]  scheduled zset of the partition (score = run_at)
-- KEYS[2]  ready zset of the partition (score = run_at)
-- KEYS[3]  "closed" marker of the partition (set once its version was completed)
-- KEYS[4]  job key prefix of the partition: the job hash of ID x is KEYS[4]..x
--          (same hash tag as every other key here)
-- KEYS[5]  unique lock prefix of the partition: the lock of key k is KEYS[5]..k
-- KEYS[6]  retry_wait zset of the partition (a debounce may move a job from it)
-- ARGV[1]  batch now in epoch seconds, or '' to use this script's TIME. The client
--          passes one TIME reading when a batch spans partitions, so delay-based
--          due times of one batch agree across partitions.
-- ARGV[2+9i .. 10+9i], per job i: id, kind, payload (raw bytes),
--          run_at ('' = now + delay), delay, max_retries, timeout, headers
--          (a JSON object, stored as field h; '' for none: no field), extras
--          ('' for an ordinary job, else its flow control and a 0x01 byte
--          when it has one (stored as field fc, a relative expiry E<s> made
--          e<now + s>, see lib/ready_score.lua), then its unique spec and workflow
--          continuation, see lib/unique_spec.lua; stored as field x)
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
if redis.call('EXISTS', KEYS[3]) == 1 then
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
local prefix, scheduled, ready = KEYS[4], KEYS[1], KEYS[2]
local sub = string.sub

-- Appends to HSET arguments args the payload after its first CHUNK bytes,
-- in fields p1 .. p<n> of CHUNK bytes each, and n in pn (record format 2,
-- see lib/chunks.lua).
local function add_chunks(args, payload, size)
  local a, n = #args, 0
  for start = CHUNK + 1, size, CHUNK do
    n = n + 1
    args[a + 1] = 'p' .. n
    args[a + 2] = sub(payload, start, start + CHUNK - 1)
    a = a + 2
  end
  args[a + 1] = 'pn'
  args[a + 2] = n
end
local retry, locks = KEYS[6], KEYS[5]
local PENDING = {scheduled = true, ready = true, leased = true, retry_wait = true}
-- where a debounce replaces the holder's payload and due time
local WAITING = {scheduled = scheduled, ready = ready, retry_wait = retry}

-- The fields that store payload in a hash of state state: whole, or (a
-- delayed job's) in chunks. Only a job that waits is chunked: memory
-- matters for the schedule, while a job due now is leased within moments,
-- and a compact hash costs Redis more CPU to build and read (about 23k and
-- 29k more instructions per job for a 100-byte payload, enqueue and lease).
local function payload_fields(args, payload, state)
  local size = #payload
  if size <= CHUNK or size > CHUNKED_MAX or state == 'ready' then
    args[#args + 1] = 'payload'
    args[#args + 1] = payload
  else
    args[#args + 1] = 'payload'
    args[#args + 1] = sub(payload, 1, CHUNK)
    add_chunks(args, payload, size)
  end
  return args
end

-- What enqueueing a unique job (mode letter umode) does while its lock (key
-- lock) holds held: 'store' (it takes the key), 'dup' (the holder keeps it)
-- or 'replace' (a debounce of the waiting holder), and the holder's ID and
-- fields state, v, run_at (for dup and replace).
local function claim(lock, held, umode)
  if not held then return 'store' end
  local holder = sub(held, 2)
  local h = redis.pcall('HMGET', prefix .. holder, 'state', 'v', 'run_at')
  if h.err then h = {} end
  if not PENDING[h[1]] then
    -- a throttle's key stays taken for its ttl after the run (its success
    -- gave the lock that expiry). Any other lock whose job is gone or
    -- finished is stale, a throttle's without an expiry too: its job never
    -- succeeded, and was lost without giving the key back (a record
    -- deleted behind the store's back), so the key is never taken for good.
    if sub(held, 1, 1) == 't' and redis.call('PTTL', lock) > 0 then return 'dup', holder, h end
    return 'store'
  end
  if umode == 'd' then
    if not WAITING[h[1]] then return 'store' end  -- it runs: the new job runs after
    if check_format(h[2]) == nil then return 'replace', holder, h end
  end
  return 'dup', holder, h
end

local out = {now_s}
local n = 1
for i = 2, #ARGV, 9 do
  local id = ARGV[i]
  local key = prefix .. id
  -- EXISTS, not HGET run_at: a damaged record without run_at (or a key of
  -- another type, on which HGET would fail the script) exists too
  if redis.call('EXISTS', key) == 1 then
    local existing = redis.pcall('HGET', key, 'run_at')
    if type(existing) ~= 'string' or check_number('run_at', existing) then existing = '' end
    out[n + 1] = 0
    out[n + 2] = existing
    out[n + 3] = id
  else
    local run_at, run_at_s
    if ARGV[i + 3] ~= '' then
      run_at_s = ARGV[i + 3]
      run_at = tonumber(run_at_s)
    else
      local delay = tonumber(ARGV[i + 4])
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
    local extras, fc = ARGV[i + 8], nil
    if extras ~= '' then
      local sep = find(extras, '\1', 1, true)
      if sep then
        fc, extras = sub(extras, 1, sep - 1), sub(extras, sep + 1)
        local rel = string.match(fc, 'E([^\n]+)$')
        if rel then
          fc = sub(fc, 1, #fc - #rel - 1) .. 'e' .. string.format('%.17g', now + tonumber(rel))
        end
      end
    end
    local verdict, holder, h = 'store', nil, nil
    local lock, umode, ttl = nil, nil, nil
    local ukey = nil
    if extras ~= '' then ukey, umode, ttl = unique_spec(extras) end
    if ukey then
      lock = locks .. ukey
      local held = redis.pcall('GET', lock)
      if type(held) ~= 'string' then held = nil end
      verdict, holder, h = claim(lock, held, umode)
    end
    if verdict == 'dup' then
      local due = h[3]
      if type(due) ~= 'string' or check_number('run_at', due) then due = '' end
      out[n + 1] = 0
      out[n + 2] = due
      out[n + 3] = holder
    elseif verdict == 'replace' then
      -- the waiting holder takes this job's payload, headers and due time
      local hkey = prefix .. holder
      redis.call('ZREM', WAITING[h[1]], holder)
      local pn = tonumber(redis.call('HGET', hkey, 'pn'))
      if pn and pn >= 1 and pn <= MAX_CHUNKS and pn % 1 == 0 then
        local gone = {'pn'}
        for k = 1, pn do gone[k + 1] = 'p' .. k end
        redis.call('HDEL', hkey, unpack(gone))
      end
      local args = payload_fields({}, ARGV[i + 2], state)
      args[#args + 1] = 'run_at'
      args[#args + 1] = run_at_s
      args[#args + 1] = 'state'
      args[#args + 1] = state
      redis.call('HSET', hkey, unpack(args))
      if ARGV[i + 7] ~= '' then
        redis.call('HSET', hkey, 'h', ARGV[i + 7])
      else
        redis.call('HDEL', hkey, 'h')
      end
      local score = run_at_s
      if zset == ready then score = ready_score(run_at_s, redis.call('HGET', hkey, 'fc')) end
      redis.call('ZADD', zset, score, holder)
      out[n + 1] = 0
      out[n + 2] = run_at_s
      out[n + 3] = holder
    else
      local payload = ARGV[i + 2]
      if #payload <= CHUNK or zset == ready or #payload > CHUNKED_MAX then
        redis.call('HSET', key, 'kind', ARGV[i + 1], 'payload', payload, 'run_at', run_at_s,
          'state', state, 'attempts', '0', 'max_retries', ARGV[i + 5], 'timeout', ARGV[i + 6],
          'created_at', now_s, 'v', FORMAT_S)
      else
        -- one HSET with the chunks: a second call would cost more than the fields
        local args = payload_fields({'kind', ARGV[i + 1]}, payload, state)
        local more = {'run_at', run_at_s, 'state', state, 'attempts', '0', 'max_retries',
          ARGV[i + 5], 'timeout', ARGV[i + 6], 'created_at', now_s, 'v', FORMAT_S}
        for k = 1, #more do args[#args + 1] = more[k] end
        redis.call('HSET', key, unpack(args))
      end
      if ARGV[i + 7] ~= '' then redis.call('HSET', key, 'h', ARGV[i + 7]) end
      if extras ~= '' then redis.call('HSET', key, 'x', extras) end
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
      redis.call('ZADD', zset, score, id)
      out[n + 1] = 1
      out[n + 2] = run_at_s
      out[n + 3] = id
    end
  end
  n = n + 3
end
return out
