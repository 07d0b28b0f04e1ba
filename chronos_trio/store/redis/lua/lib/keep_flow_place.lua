--@include clock
--@include deleted_error
--@include fails
--@include outbox_key
--@include workflow_keep
-- Before the hash key of job id (a job key prefix's; its state and extras x
-- as read) is deleted (delete.lua, purge.lua): keep its place in its
-- workflow, in the same step. An end of it still in the outbox (succeeded,
-- dead or aborted, not continued yet) keeps what the continuer reads; a job that
-- never ended (scheduled, ready, retry_wait) whose continuation holds
-- failure handling ends dead (DELETED_ERROR) into the outbox, so the group
-- that allows failures around it (a batch) still completes and its
-- on_failure is called. Either way the hash moves to the partition's gone
-- key of the job (<tag>:gone:<id>, read by outbox_read.lua when the job
-- hash is not an end, deleted by the continuer with the entry), kept
-- WORKFLOW_KEEP seconds; true then: the caller must not delete it. False:
-- nothing kept (its flow stops there), the caller deletes the hash.
local function keep_flow_place(prefix, id, key, state, x)
  local outbox = outbox_key(prefix)
  local place = string.sub(prefix, 1, -3) .. 'gone:' .. id
  if (state == 'succeeded' or state == 'dead' or state == 'aborted')
      and redis.call('ZSCORE', outbox, id) then
    redis.call('RENAME', key, place)
  elseif (state == 'scheduled' or state == 'ready' or state == 'retry_wait') and fails(x) then
    redis.call('RENAME', key, place)
    redis.call('HSET', place, 'state', 'dead', 'last_error', DELETED_ERROR)
    redis.call('ZADD', outbox, (clock()), id)
  else
    return false
  end
  redis.call('EXPIRE', place, WORKFLOW_KEEP)
  return true
end
