-- trim.lua: delete finished jobs of ONE partition: retained succeeded jobs past
-- their retention, dead jobs older than a maximum age, and the N oldest dead jobs.
-- Work per call is capped so one call never blocks Redis for long; the client
-- calls again while 'more' is 1.
--
-- KEYS[1]  succeeded zset (score = end of retention)
-- KEYS[2]  dead zset (score = finished_at)
-- KEYS[3]  job key prefix: the job hash of ID x is KEYS[3]..x
-- ARGV[1]  dead max age in seconds, or '' for no age limit
-- ARGV[2]  cap: at most this many deletions per kind (succeeded, old dead) per call
-- ARGV[3]  additionally delete this many of the oldest dead jobs (0 = none)
--
-- Returns {deleted, more (1 when a cap was hit), dead jobs left}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local cap = tonumber(ARGV[2])
local deleted, more = 0, 0
local function drop(zset, ids)
  if #ids == 0 then return end
  redis.call('ZPOPMIN', zset, #ids)
  for _, id in ipairs(ids) do redis.call('DEL', KEYS[3] .. id) end
  deleted = deleted + #ids
  if #ids >= cap then more = 1 end
end
if cap > 0 then
  drop(KEYS[1], redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, cap))
  if ARGV[1] ~= '' then
    local limit = now - tonumber(ARGV[1])
    drop(KEYS[2], redis.call('ZRANGE', KEYS[2], '-inf', limit, 'BYSCORE', 'LIMIT', 0, cap))
  end
end
local oldest = tonumber(ARGV[3])
if oldest > 0 then
  local ids = redis.call('ZRANGE', KEYS[2], 0, oldest - 1)
  if #ids > 0 then
    redis.call('ZPOPMIN', KEYS[2], #ids)
    for _, id in ipairs(ids) do redis.call('DEL', KEYS[3] .. id) end
    deleted = deleted + #ids
  end
end
return {deleted, more, redis.call('ZCARD', KEYS[2])}
