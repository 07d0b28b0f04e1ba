--@include probe_job
-- HMGET a job hash: the values, or nil and why there is no job hash to read.
-- The fields asked for start with 'v', 'state' (every record has a state:
-- the fast path; hot loops inline this with a field of their own).
local function read_job(key, ...)
  local f = redis.pcall('HMGET', key, ...)
  if f[2] then return f, nil end
  return probe_job(key, f, select('#', ...))
end
