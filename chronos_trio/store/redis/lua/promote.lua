-- promote.lua: move up to ARGV[1] due jobs of ONE partition from scheduled and
-- retry_wait to ready, earliest due first (ties by job ID, as in the zsets).
--
-- KEYS[1]  scheduled zset (score = run_at)
-- KEYS[2]  retry_wait zset (score = run_at)
-- KEYS[3]  ready zset (score = run_at)
-- KEYS[4]  job key prefix: the job hash of ID x is KEYS[4]..x
-- KEYS[5]  dead zset (score = finished_at): where damaged records go
-- KEYS[6]  quarantine hash of the partition: entries without a job hash
-- ARGV[1]  limit (> 0): due entries looked at, promoted or set aside
--
-- Each due entry is judged before anything is written for it (nothing in a
-- judgement can fail; see _prelude.lua): a record whose state is not the one of
-- its index is dead-lettered, an entry without a job hash is quarantined, a
-- record of a newer format stays where it is, untouched (and does not count as
-- waiting in next_due).
--
-- A key of the wrong type among KEYS fails the script before it writes anything.
--
-- Returns {promoted, next_due ('' when nothing waits), now, set aside (see
-- _prelude.lua)}. next_due is the earliest due time of a job this version
-- can still promote; when the limit cut the due entries short it is the
-- earliest left, so the caller comes back at once.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_s = string.format('%.17g', now)
local limit = tonumber(ARGV[1])
local aside = new_aside()
local s = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local r = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
if #s > 0 or #r > 0 then
  local bad_key = wrong_type(KEYS[3], 'zset', KEYS[5], 'zset', KEYS[6], 'hash')
  if bad_key then return redis.error_reply(bad_key) end
end
-- merge the two due lists by (score, id), judging each record, then writing it
local i, j, n, promoted = 1, 1, 0, 0
local scored = {}
local taken = {{}, {}}
while n < limit and (i <= #s or j <= #r) do
  local take_s
  if i > #s then
    take_s = false
  elseif j > #r then
    take_s = true
  else
    local a, b = tonumber(s[i + 1]), tonumber(r[j + 1])
    take_s = a < b or (a == b and s[i] < r[j])
  end
  local id, score, from, state
  if take_s then
    id, score, from, state = s[i], s[i + 1], 1, 'scheduled'
    i = i + 2
  else
    id, score, from, state = r[j], r[j + 1], 2, 'retry_wait'
    j = j + 2
  end
  n = n + 1
  local key = KEYS[4] .. id
  local f = redis.pcall('HMGET', key, 'v', 'state')
  local none = nil
  if not f[2] then f, none = probe_job(key, f, 2) end
  local index = from == 1 and 'scheduled' or 'retry'
  local v, bad = f and f[1], nil
  if v and v ~= FORMAT_S then bad = check_format(v) end
  if bad == 'newer' then
    newer(aside, id, v)  -- stays where it is
  else
    local tk = taken[from]
    tk[#tk + 1] = id
    if not f then
      quarantine(aside, KEYS[6], id, none, index, now)
    elseif bad or f[2] ~= state then
      dead_letter(aside, key, id, KEYS[5], bad or check_state(f[2], state, index), now, now_s)
    else
      redis.call('HSET', key, 'state', 'ready')
      scored[#scored + 1] = score
      scored[#scored + 1] = id
      promoted = promoted + 1
    end
  end
end
for c = 1, #scored, 1000 do
  redis.call('ZADD', KEYS[3], unpack(scored, c, math.min(c + 999, #scored)))
end
zrem_all(KEYS[1], taken[1])
zrem_all(KEYS[2], taken[2])
-- Every due entry was looked at unless a due list filled the limit or the
-- merge stopped at it: then what is left may be due and the caller comes
-- back at once. Otherwise only entries of a newer format are left due, and
-- the next due time is the first one after now.
local complete = i > #s and j > #r and #s < 2 * limit and #r < 2 * limit
local lo = complete and ('(' .. now_s) or '-inf'
local next_due = nil
local hs = redis.call('ZRANGE', KEYS[1], lo, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
local hr = redis.call('ZRANGE', KEYS[2], lo, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
if hs[2] then next_due = tonumber(hs[2]) end
if hr[2] and (next_due == nil or tonumber(hr[2]) < next_due) then next_due = tonumber(hr[2]) end
local nd = ''
if next_due then nd = string.format('%.17g', next_due) end
return {promoted, nd, now_s, aside}
