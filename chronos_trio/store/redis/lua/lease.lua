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
-- ARGV[1]  count (> 0)
-- ARGV[2]  lease duration in seconds
-- ARGV[3]  worker id (lease owner)
-- ARGV[4]  token nonce: random per call and partition. A token is nonce..counter,
--          unique across partitions (nonce) and across calls (counter), even
--          after Redis lost its data and the counter restarted.
-- ARGV[5]  the leased zset's sentinel member (see KEYS[2])
--
-- Returns {now, expires_at, then per job 10 entries: id, token, kind, payload,
-- run_at, attempts (already incremented), max_retries, timeout, last_error,
-- created_at}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local exp = now + tonumber(ARGV[2])
local exp_s = string.format('%.17g', exp)
local out = {string.format('%.17g', now), exp_s}
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
local n = #popped / 2
if n == 0 then return out end
local counter = redis.call('INCRBY', KEYS[3], n) - n
local scored = {'+inf', ARGV[5]}  -- sentinel first: the zset is converted before the inserts
for i = 1, #popped, 2 do
  local id = popped[i]
  local key = KEYS[4] .. id
  local f = redis.call('HMGET', key, 'kind', 'payload', 'attempts', 'max_retries', 'timeout',
    'last_error', 'created_at')
  counter = counter + 1
  local token = ARGV[4] .. counter
  local attempts = tonumber(f[3]) + 1
  redis.call('HSET', key, 'state', 'leased', 'attempts', attempts, 'lease_token', token,
    'lease_owner', ARGV[3], 'lease_expires_at', exp_s)
  scored[#scored + 1] = exp_s
  scored[#scored + 1] = id
  local o = #out
  out[o + 1] = id
  out[o + 2] = token
  out[o + 3] = f[1]
  out[o + 4] = f[2]
  out[o + 5] = popped[i + 1]
  out[o + 6] = attempts
  out[o + 7] = f[4]
  out[o + 8] = f[5]
  out[o + 9] = f[6] or ''
  out[o + 10] = f[7]
end
-- one ZADD for the batch (a redis.call costs more than the insert itself);
-- chunked to stay far below Lua's unpack() limit
for c = 1, #scored, 1000 do
  redis.call('ZADD', KEYS[2], unpack(scored, c, math.min(c + 999, #scored)))
end
return out
