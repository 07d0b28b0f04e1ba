--@include join_payload
local JOB_FIELDS = {'kind', 'payload', 'run_at', 'state', 'attempts', 'max_retries', 'timeout',
  'lease_token', 'lease_owner', 'lease_expires_at', 'last_error', 'created_at', 'finished_at'}
local JOB_READ = {unpack(JOB_FIELDS)}
JOB_READ[14] = 'pn'

-- The 13 JOB_FIELDS of the job hash at key as stored, the payload joined
-- (false when its chunks cannot be joined).
local function job_fields(key)
  local g = redis.call('HMGET', key, unpack(JOB_READ))
  if g[14] then g[2] = join_payload(key, g[2], g[14]) or false end
  g[14] = nil
  return g
end
