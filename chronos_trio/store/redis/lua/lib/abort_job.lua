--@include aborted_key
--@include prune_aborted
--@include unique_finished
--@include notify_done
-- Abort the job id of the job hash key (the caller judged it; f_x and f_w are
-- its fields x and w): into the dead index (score now) and the aborted marks,
-- then state aborted with last_error text and its finish time, the lease
-- cleared, its unique key released and its waiters woken. The marks are
-- written with pcall: a mark is a hint, and never fails the script.
local function abort_job(prefix, key, id, dead_zset, text, now, now_s, f_x, f_w)
  redis.call('ZADD', dead_zset, now, id)  -- the index first: see wrong_type
  redis.pcall('ZADD', aborted_key(prefix), now, id)
  prune_aborted(prefix, dead_zset)
  redis.call('HSET', key, 'state', 'aborted', 'last_error', text, 'finished_at', now_s,
    'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  unique_finished(prefix, id, f_x, false)
  notify_done(key, f_w)
end
