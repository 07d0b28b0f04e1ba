--@include aborted_key
--@include fails
--@include outbox_key
--@include prune_aborted
--@include unique_finished
--@include notify_done
-- Abort the job id of the job hash key (the caller judged it; f_x and f_w are
-- its fields x and w): into the dead index (score now) and the aborted marks,
-- then state aborted with last_error text and its finish time, the lease
-- cleared, its unique key released and its waiters woken. The marks are
-- written with pcall: a mark is a hint, and never fails the script. A
-- workflow job whose continuation holds failure handling goes to the outbox
-- in the same step (outbox_read.lua reads an aborted job as failed, its
-- error the abort's): its step ends failed, so a batch around it completes
-- and its on_failure is called. Returns true then, else false.
local function abort_job(prefix, key, id, dead_zset, text, now, now_s, f_x, f_w)
  redis.call('ZADD', dead_zset, now, id)  -- the index first: see wrong_type
  redis.pcall('ZADD', aborted_key(prefix), now, id)
  prune_aborted(prefix, dead_zset)
  redis.call('HSET', key, 'state', 'aborted', 'last_error', text, 'finished_at', now_s,
    'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
  unique_finished(prefix, id, f_x, false)
  notify_done(key, f_w)
  if fails(f_x) then
    redis.call('ZADD', outbox_key(prefix), now, id)
    return true
  end
  return false
end
