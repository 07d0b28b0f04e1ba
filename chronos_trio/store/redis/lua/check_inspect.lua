-- check_inspect.lua: read jobs of ONE partition for the store checker, each
-- job's record and its place in every index in one atomic reading (read-only).
--
-- KEYS[1]     scheduled zset of the partition (score = run_at)
-- KEYS[2]     ready zset (score = run_at)
-- KEYS[3]     leased zset (score = lease expiry)
-- KEYS[4]     retry_wait zset (score = run_at)
-- KEYS[5]     succeeded zset (score = end of retention)
-- KEYS[6]     dead zset (score = finished_at); KEYS[1..6] are "the 6 indexes" below
-- KEYS[7]     job key prefix: the job hash of ID x is KEYS[7]..x
-- ARGV[1]     'all': report every job of ARGV[2..]; 'missing': report only those
--             whose record is gone but that some index still holds
-- ARGV[2..]   job ids (the caller bounds how many per call)
--
-- Returns {now, then per reported job 2 + INSPECTED + 6 entries: id, exists
-- (0 no, 1 yes, 2 yes and it expires by itself), the INSPECTED values of
-- inspect_fields (lib/inspect_fields.lua: the fields kind, payload (joined from its
-- chunks), run_at, state, attempts, max_retries, timeout, lease_token,
-- lease_owner, lease_expires_at, last_error, created_at, finished_at, v, h,
-- fc, result_until, nil when absent, then why the payload's chunks cannot be
-- joined, nil when they can), then its score in each of the 6 indexes (nil
-- when not there)}. The repair script compares this very reading.
--@include inspect_fields
local t = redis.call('TIME')
local out = {string.format('%.17g', tonumber(t[1]) + tonumber(t[2]) / 1000000)}
local missing_only = ARGV[1] == 'missing'
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = KEYS[7] .. id
  -- A key of another type is not a record (its index entries are orphans,
  -- quarantined by repair; the key is not ours to delete). Reading it as a
  -- hash would fail the whole script: the checker must be total too.
  local exists = redis.call('TYPE', key).ok == 'hash' and 1 or 0
  -- 2: a record that expires by itself (a succeeded job kept for its result)
  if exists == 1 and redis.call('PTTL', key) > 0 then exists = 2 end
  if not (missing_only and exists ~= 0) then
    local scores, held = {}, false
    for z = 1, 6 do
      scores[z] = redis.call('ZSCORE', KEYS[z], id)
      if scores[z] then held = true end
    end
    if not missing_only or held then
      local f = {}
      if exists ~= 0 then
        f = inspect_fields(key)
      end
      local o = #out
      out[o + 1] = id
      out[o + 2] = exists
      -- false becomes a nil reply; an absent field is false in HMGET already
      for k = 1, INSPECTED do out[o + 2 + k] = f[k] or false end
      for z = 1, 6 do out[o + 2 + INSPECTED + z] = scores[z] or false end
    end
  end
end
return out
