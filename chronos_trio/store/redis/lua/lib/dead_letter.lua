--@include job_fields
--@include unique_finished
--@include notify_done
-- Dead-letter a damaged record (the caller removes it from the index it was
-- found in) and report it with its fields as now stored. Dead, it gives its
-- unique key back (when its field x still names it) like any dead job.
local function dead_letter(aside, key, id, dead_zset, reason, now, now_s)
  redis.call('ZADD', dead_zset, now, id)  -- the index first: see wrong_type
  redis.call('HSET', key, 'state', 'dead', 'last_error', 'damaged record: ' .. reason,
    'finished_at', now_s, 'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  unique_finished(string.sub(key, 1, #key - #id), id, redis.call('HGET', key, 'x'), false)
  local d = aside[1]
  d[#d + 1] = id
  local g = job_fields(key)
  for k = 1, 13 do d[#d + 1] = g[k] end
  notify_done(key, redis.call('HGET', key, 'w'))
end
