-- lease.lua: lease up to ARGV[1] ready jobs of ONE partition, oldest due first.
--
-- KEYS[1]  ready zset (score = run_at)
-- KEYS[2]  leased zset (score = lease expiry). It always holds the sentinel
--          member ARGV[5] with score +inf: a member longer than 64 bytes makes
--          Redis keep the zset as a skiplist, whose inserts stay O(log n); as a
--          listpack (any zset under 128 members, i.e. a typical in-flight set)
--          each insert scans the whole zset, which dominated this script.
-- KEYS[3]  fencing counter of the partition (INCRBY)
-- KEYS[4]  job key prefix: the job hash of ID x is KEYS[4]..x
-- KEYS[5]  dead zset (score = finished_at): where damaged records go
-- KEYS[6]  quarantine hash of the partition: ready entries without a job hash
-- ARGV[1]  count (> 0)
-- ARGV[2]  lease duration in seconds
-- ARGV[3]  worker id (lease owner)
-- ARGV[4]  token nonce: random per call and partition. A token is nonce..counter,
--          unique across partitions (nonce) and across calls (counter), even
--          after Redis lost its data and the counter restarted.
-- ARGV[5]  the leased zset's sentinel member (see KEYS[2])
--
-- Each popped entry is judged before anything is written for it (nothing in a
-- judgement can fail; see _prelude.lua): a record without kind or payload, or
-- whose attempts is not a count, is dead-lettered, an entry without a job hash
-- is quarantined, a record of a newer format goes back to the ready zset with
-- its score, untouched. What was set aside is replaced by further ready jobs,
-- so the batch is short only for want of usable ready jobs (at most ARGV[1] +
-- 256 entries are looked at per call; the tokens of set-aside entries go
-- unused). The job's state is not read: the index it is in decides, and the
-- lease overwrites it. The fields returned as stored (max_retries, timeout,
-- last_error, created_at) are checked where they are decoded, by the client
-- (number parsing is the costliest part of a Lua check): it dead-letters a job
-- whose fields it cannot use with this lease's token, so no worker is ever
-- handed one.
--
-- A key of the wrong type among KEYS fails the script before it writes
-- anything (checked first: the pop must never be followed by a failure).
--
-- Returns {now, expires_at, set aside (see _prelude.lua), then per job 11
-- entries: id, token, kind, payload, run_at, attempts (already incremented),
-- max_retries, timeout, last_error, created_at, headers ('' for none)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
local exp = now + tonumber(ARGV[2])
local exp_s = string.format('%.17g', exp)
local aside = new_aside()
local out = {now_s, exp_s, aside}
local target = tonumber(ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then return out end
local bad_key = wrong_type(KEYS[2], 'zset', KEYS[5], 'zset', KEYS[6], 'hash')
if bad_key then return redis.error_reply(bad_key) end
-- Tokens for the whole batch before the pop: INCRBY is the one call here
-- that could fail (a counter key of another type), so it comes before any
-- write. Tokens only need to be unique: values of set-aside entries go unused.
local counter = redis.call('INCRBY', KEYS[3], target) - target
local asked, budget, n = target, target + 256, 0
local back = {}
local scored = {'+inf', ARGV[5]}  -- sentinel first: the zset is converted before the inserts
local popped = redis.call('ZPOPMIN', KEYS[1], asked)
while #popped > 0 do
  budget = budget - #popped / 2
  for i = 1, #popped, 2 do
    local id = popped[i]
    local key = KEYS[4] .. id
    local f = redis.pcall('HMGET', key, 'v', 'kind', 'payload', 'attempts', 'max_retries',
      'timeout', 'last_error', 'created_at', 'h')
    local none = nil
    if not f[2] then f, none = probe_job(key, f, 9) end
    if not f then
      quarantine(aside, KEYS[6], id, none, 'ready', now)
    else
      local v, why = f[1], nil
      if v and v ~= FORMAT_S then why = check_format(v) end
      local attempts = tonumber(f[4])
      if why == 'newer' then
        back[#back + 1] = popped[i + 1]
        back[#back + 1] = id
        newer(aside, id, v)
      elseif why or not f[2] or f[2] == '' or not f[3] or not is_count(attempts) then
        -- the cheap checks first; the reason is worked out only for a bad record
        why = why or check_text('kind', f[2]) or (not f[3] and missing('payload', f[3]))
          or check_count('attempts', f[4])
        dead_letter(aside, key, id, KEYS[5], why, now, now_s)
      else
        n = n + 1
        local token = ARGV[4] .. (counter + n)
        attempts = attempts + 1
        redis.call('HSET', key, 'state', 'leased', 'attempts', attempts, 'lease_token', token,
          'lease_owner', ARGV[3], 'lease_expires_at', exp_s)
        scored[#scored + 1] = exp_s
        scored[#scored + 1] = id
        local o = #out
        out[o + 1] = id
        out[o + 2] = token
        out[o + 3] = f[2]
        out[o + 4] = f[3]
        out[o + 5] = popped[i + 1]
        out[o + 6] = attempts
        out[o + 7] = f[5]
        out[o + 8] = f[6]
        out[o + 9] = f[7] or ''
        out[o + 10] = f[8]
        out[o + 11] = f[9] or ''
      end
    end
  end
  local more = math.min(target - n, budget)
  if #popped < 2 * asked or more <= 0 then break end
  asked = more
  popped = redis.call('ZPOPMIN', KEYS[1], more)
end
for c = 1, #back, 1000 do
  redis.call('ZADD', KEYS[1], unpack(back, c, math.min(c + 999, #back)))
end
if n == 0 then return out end
for c = 1, #scored, 1000 do
  redis.call('ZADD', KEYS[2], unpack(scored, c, math.min(c + 999, #scored)))
end
return out
