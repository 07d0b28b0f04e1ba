-- The slow path of reading a job hash whose HMGET reply f (n fields) lacks
-- the field every record has: f, or nil and why there is no job hash to
-- read (no key at all, or a key of another type).
local function probe_job(key, f, n)
  if f.err then
    local t = redis.pcall('TYPE', key)
    return nil, 'its key holds a ' .. tostring(t.ok or '?') .. ', not a job hash'
  end
  for i = 1, n do
    if f[i] then return f, nil end
  end
  -- every field asked for is absent: no record, or one missing all of them
  if redis.call('EXISTS', key) == 0 then return nil, 'no record' end
  return f, nil
end
