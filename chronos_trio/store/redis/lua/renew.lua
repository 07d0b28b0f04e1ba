-- renew.lua: extend leases of ONE partition that are still held with their token.
--
-- KEYS[1]  leased zset (score = lease expiry)
-- KEYS[2]  job key prefix: the job hash of ID x is KEYS[2]..x
-- KEYS[3]  dead zset (score = finished_at): where damaged records go
-- ARGV[1]  lease duration in seconds
-- ARGV[2+2i], ARGV[3+2i]  job id, fencing token
--
-- Each record is judged before anything is written for it (see README.md;
-- nothing in a judgement can fail, so no record can stop the script after
-- another's writes). A record not leased with that token (or with no job hash)
-- is not ours and is not touched. One leased with that token whose
-- lease_expires_at is unreadable is dead-lettered (its expiry cannot be
-- judged); one of a newer format is left untouched. A renewed unique job's
-- lock, when it lapses (a ttl), is kept for at least the new lease. A renewed
-- job an abort was asked for (field ab, see abort.lua) is reported so: its
-- worker learns it in this reply, at the cost of one more field read.
--
-- Returns {expires_at, set aside (see README.md), code_1, code_2, ...};
-- code 1 renewed, 0 lease not held (wrong token, not leased, expired or gone:
-- nothing changes), 2 dead-lettered as damaged, 3 left alone (newer format),
-- 4 renewed, and an abort was asked (the worker cancels the run).
--@include clock
--@include dead_letter
--@include judge_lease
--@include lock_key
--@include new_aside
--@include newer
--@include probe_job
--@include unique_spec
local now, now_s = clock()
local exp = now + tonumber(ARGV[1])
local exp_s = string.format('%.17g', exp)
local lease_ms = math.ceil(tonumber(ARGV[1]) * 1000)
local aside = new_aside()
local out = {exp_s, aside}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local key = KEYS[2] .. id
  local f = redis.pcall('HMGET', key, 'v', 'state', 'lease_token', 'lease_expires_at', 'x', 'ab')
  if not f[2] then f = probe_job(key, f, 6) end
  -- judge the record (nothing here can fail) ...
  local p, w = judge_lease(f, ARGV[i + 1], now)
  -- ... then write what it decides
  if p == 1 then
    redis.call('ZADD', KEYS[1], exp, id)
    redis.call('HSET', key, 'lease_expires_at', exp_s)
    local ukey, umode, ttl = unique_spec(f[5])
    if ukey and ttl and umode ~= 't' then
      -- a unique lock that lapses lasts at least as long as the lease it renews
      local lock = lock_key(KEYS[2], ukey)
      if redis.pcall('GET', lock) == umode .. id and redis.call('PTTL', lock) < lease_ms then
        redis.call('PEXPIRE', lock, lease_ms)
      end
    end
    if f[6] then p = 4 end
  elseif p == 2 then
    dead_letter(aside, key, id, KEYS[3], w, now, now_s)
    redis.call('ZREM', KEYS[1], id)
  elseif p == 3 then
    newer(aside, id, w)
  end
  out[#out + 1] = p
end
return out
