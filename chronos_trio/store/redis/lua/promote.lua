-- promote.lua: move up to ARGV[1] due jobs of ONE partition from scheduled and
-- retry_wait to ready, earliest due first (ties by job ID, as in the zsets).
--
-- KEYS[1]  scheduled zset (score = run_at)
-- KEYS[2]  retry_wait zset (score = run_at)
-- KEYS[3]  ready zset (score = run_at)
-- KEYS[4]  job key prefix: the job hash of ID x is KEYS[4]..x
-- ARGV[1]  limit (> 0)
--
-- Returns {promoted, next_due ('' when nothing waits), now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local limit = tonumber(ARGV[1])
local s = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local r = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
-- merge the two due lists by (score, id)
local i, j, n, ns, nr = 1, 1, 0, 0, 0
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
  local id, score
  if take_s then
    id, score = s[i], s[i + 1]
    i = i + 2
    ns = ns + 1
  else
    id, score = r[j], r[j + 1]
    j = j + 2
    nr = nr + 1
  end
  redis.call('HSET', KEYS[4] .. id, 'state', 'ready')
  redis.call('ZADD', KEYS[3], score, id)
  n = n + 1
end
-- the promoted entries are a prefix of each zset, so pop them in one call each
if ns > 0 then redis.call('ZPOPMIN', KEYS[1], ns) end
if nr > 0 then redis.call('ZPOPMIN', KEYS[2], nr) end
local next_due = nil
local hs = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local hr = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if hs[2] then next_due = tonumber(hs[2]) end
if hr[2] and (next_due == nil or tonumber(hr[2]) < next_due) then next_due = tonumber(hr[2]) end
local nd = ''
if next_due then nd = string.format('%.17g', next_due) end
return {n, nd, string.format('%.17g', now)}
