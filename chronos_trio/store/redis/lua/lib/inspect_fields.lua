--@include join_payload
-- What the store checker reads of the job hash at key (check_inspect.lua,
-- check_repair.lua): INSPECTED values, the 13 JOB_FIELDS, v, h, fc and
-- result_until (every field a record is judged by, store/_record_rules.py;
-- _check.py's FIELDS), the payload joined (false when it cannot be), then
-- why its chunks cannot be joined (false: they can).
local INSPECTED = 18
local function inspect_fields(key)
  local f = redis.call('HMGET', key, 'kind', 'payload', 'run_at', 'state', 'attempts',
    'max_retries', 'timeout', 'lease_token', 'lease_owner', 'lease_expires_at',
    'last_error', 'created_at', 'finished_at', 'v', 'h', 'fc', 'result_until', 'pn')
  local why = false
  if f[INSPECTED] then
    local joined, bad = join_payload(key, f[2], f[INSPECTED])
    f[2], why = joined or false, bad or false
  end
  f[INSPECTED] = why
  return f
end
