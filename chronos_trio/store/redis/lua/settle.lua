-- settle.lua: apply lease outcomes in ONE partition, each fenced by its token.
--
-- KEYS[1]  ready zset (score = run_at)
-- KEYS[2]  leased zset (score = lease expiry)
-- KEYS[3]  retry_wait zset (score = run_at)
-- KEYS[4]  succeeded zset (retained jobs, and jobs whose result lives;
--          score = end of retention)
-- KEYS[5]  dead zset (score = finished_at)
-- KEYS[6]  job key prefix: the job hash of ID x is KEYS[6]..x
-- ARGV[1+8i .. 8+8i], per settlement i: job id, fencing token,
--          kind ('s' succeeded, 'r' retry, 'd' dead, 'l' release), error text,
--          retry_delay (s), retain_for (s), result, result_ttl (s; '' when
--          there is no result to keep)
--
-- A succeeded job's record stays while it is retained (in the succeeded
-- index, trimmed by the janitor) or its result lives, whichever is longer;
-- kept only for its result, it is in no index and expires by itself
-- (PEXPIRE: nothing to trim). Its run_at stays the due time it ran for. A finished job (succeeded or dead) whose record names
-- a waiter channel (field w) is published there (see notify_done).
--
-- Each record is judged before anything is written for it (see _prelude.lua;
-- nothing in a judgement can fail, so no record can stop the script after
-- another's writes). A record not leased with that token (or with no job hash)
-- is not ours and is not touched, damaged or not. One leased with that token
-- whose lease_expires_at (or, to release it, attempts or run_at) is unreadable
-- is dead-lettered; one of a newer format is left untouched. Each outcome
-- writes the index before the record: a key of the wrong type fails the script
-- with that record unchanged (outcomes before it stay applied).
--
-- Returns {now, set aside (see _prelude.lua), code_1, code_2, ...}; code 1
-- applied, 0 the lease is no longer held with that token (or expired): the job
-- is not touched at all, 2 dead-lettered as damaged, 3 left alone (newer format).
-- How long a finished job nobody keeps stays readable for its waiters (s).
local WAITED_KEEP = 60
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
local aside = new_aside()
local out = {now_s, aside}
local settled = {}
for i = 1, #ARGV, 8 do
  local id = ARGV[i]
  local key = KEYS[6] .. id
  local f = redis.pcall('HMGET', key, 'v', 'state', 'lease_token', 'lease_expires_at',
    'attempts', 'run_at', 'w')
  if not f[2] then f = probe_job(key, f, 7) end
  -- judge the record (nothing here can fail) ...
  local p, w = 0, nil
  if f then
    local v = f[1]
    if v and v ~= FORMAT_S then w = check_format(v) end
    if w == 'newer' then
      p, w = 3, v
    elseif f[2] == 'leased' and ARGV[i + 1] ~= '' and f[3] == ARGV[i + 1] then
      -- fast path: held and unexpired (not < HUGE: inf and NaN are damage)
      local until_ = tonumber(f[4])
      if not w and until_ and until_ > now and until_ < HUGE then p = 1 end
      if p == 0 then w = w or check_number('lease_expires_at', f[4]) end
      if not w and ARGV[i + 2] == 'l' then
        w = check_count('attempts', f[5]) or check_number('run_at', f[6])
      end
      if w then p = 2 end
    end
  end
  -- ... then write what it decides
  if p == 3 then
    newer(aside, id, w)
  elseif p == 2 then
    settled[#settled + 1] = id
    dead_letter(aside, key, id, KEYS[5], w, now, now_s)  -- (notifies)
  elseif p == 1 then
    settled[#settled + 1] = id
    local kind = ARGV[i + 2]
    if kind == 's' then
      local retain = tonumber(ARGV[i + 5])
      local ttl = tonumber(ARGV[i + 7])
      if retain > 0 or ttl or f[7] then
        if ttl then
          redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s,
            'lease_token', '', 'lease_owner', '', 'lease_expires_at', '',
            'result', ARGV[i + 6], 'result_until', string.format('%.17g', now + ttl))
        else
          redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s,
            'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
        end
        if retain > 0 then
          -- retained for inspection: listed and counted, trimmed by the janitor
          local keep = retain
          if ttl and ttl > keep then keep = ttl end
          redis.call('ZADD', KEYS[4], now + keep, id)
        else
          -- kept only for its result, or for its waiters to read the outcome
          -- after their wake-up: no index entry, the record expires by itself
          redis.call('PEXPIRE', key, math.ceil((ttl or WAITED_KEEP) * 1000))
        end
      else
        redis.call('DEL', key)
      end
      notify_done(key, f[7])
    elseif kind == 'r' then
      local due = now + math.max(0, tonumber(ARGV[i + 4]))
      redis.call('ZADD', KEYS[3], due, id)
      redis.call('HSET', key, 'state', 'retry_wait', 'run_at', due, 'last_error', ARGV[i + 3],
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
    elseif kind == 'd' then
      redis.call('ZADD', KEYS[5], now, id)
      redis.call('HSET', key, 'state', 'dead', 'last_error', ARGV[i + 3], 'finished_at', now_s,
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
      notify_done(key, f[7])
    else
      -- release: back to ready at once, keeping its due time; the attempt is given back
      redis.call('ZADD', KEYS[1], f[6], id)
      redis.call('HSET', key, 'state', 'ready', 'attempts', math.max(0, tonumber(f[5]) - 1),
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
    end
  end
  out[#out + 1] = p
end
-- one ZREM for the batch (chunked below Lua's unpack() limit)
zrem_all(KEYS[2], settled)
return out
