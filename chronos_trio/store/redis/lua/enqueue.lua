-- enqueue.lua: store new jobs in ONE partition; a job whose ID exists is left untouched.
--
-- KEYS[1]  scheduled zset of the partition (score = run_at)
-- KEYS[2]  ready zset of the partition (score = run_at)
-- KEYS[3]  "closed" marker of the partition (set once its version was completed)
-- KEYS[4]  job key prefix of the partition: the job hash of ID x is KEYS[4]..x
--          (same hash tag as every other key here)
-- ARGV[1]  batch now in epoch seconds, or '' to use this script's TIME. The client
--          passes one TIME reading when a batch spans partitions, so delay-based
--          due times of one batch agree across partitions.
-- ARGV[2+8i .. 9+8i], per job i: id, kind, payload (raw bytes),
--          run_at ('' = now + delay), delay, max_retries, timeout, headers
--          (a JSON object, stored as field h; '' for none: no field)
--
-- Each job hash gets v = FORMAT, the record format (see _prelude.lua), and the
-- payload of a delayed job, when of more than CHUNK bytes (at most
-- CHUNKED_MAX), is stored in chunks. An
-- existing key under a job's ID is never touched, whatever it holds (a
-- damaged record, one of a newer format, a key of another type).
--
-- Returns {'closed'} when the partition was closed (the client re-reads the
-- topology and routes the jobs again), else {now, created_1, run_at_1, ...}
-- with created = 1 (stored) or 0 (ID existed; run_at is the existing one,
-- '' when that key holds no readable due time).
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
-- see _prelude.lua).
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
local out = {now_s}
local n = 1
for i = 2, #ARGV, 8 do
  local id = ARGV[i]
  local key = prefix .. id
  -- EXISTS, not HGET run_at: a damaged record without run_at (or a key of
  -- another type, on which HGET would fail the script) exists too
  if redis.call('EXISTS', key) == 1 then
    local existing = redis.pcall('HGET', key, 'run_at')
    if type(existing) ~= 'string' or check_number('run_at', existing) then existing = '' end
    out[n + 1] = 0
    out[n + 2] = existing
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
    local payload = ARGV[i + 2]
    local size = #payload
    -- Only a job that waits is chunked: memory matters for the schedule,
    -- while a job due now is leased within moments, and a compact hash
    -- costs Redis more CPU to build and read (about 23k and 29k more
    -- instructions per job for a 100-byte payload, enqueue and lease).
    if size <= CHUNK or size > CHUNKED_MAX or zset == ready then
      redis.call('HSET', key, 'kind', ARGV[i + 1], 'payload', payload, 'run_at', run_at_s,
        'state', state, 'attempts', '0', 'max_retries', ARGV[i + 5], 'timeout', ARGV[i + 6],
        'created_at', now_s, 'v', FORMAT_S)
    else
      -- one HSET with the chunks: a second call would cost more than the fields
      local args = {'kind', ARGV[i + 1], 'payload', sub(payload, 1, CHUNK), 'run_at', run_at_s,
        'state', state, 'attempts', '0', 'max_retries', ARGV[i + 5], 'timeout', ARGV[i + 6],
        'created_at', now_s, 'v', FORMAT_S}
      add_chunks(args, payload, size)
      redis.call('HSET', key, unpack(args))
    end
    if ARGV[i + 7] ~= '' then redis.call('HSET', key, 'h', ARGV[i + 7]) end
    redis.call('ZADD', zset, run_at_s, id)
    out[n + 1] = 1
    out[n + 2] = run_at_s
  end
  n = n + 2
end
return out
