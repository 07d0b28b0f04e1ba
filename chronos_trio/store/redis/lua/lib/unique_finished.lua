--@include unique_spec
--@include lock_key
-- The job id finished (succeeded: ok true; dead or deleted: false): a
-- throttle's lock it holds starts its ttl, any other lock it holds is
-- released. A lock another job holds (or none) is left as it is. x: the
-- record's field x.
local function unique_finished(prefix, id, x, ok)
  local key, mode, ttl = unique_spec(x)
  if not key then return end
  local lock = lock_key(prefix, key)
  if redis.pcall('GET', lock) ~= mode .. id then return end
  if ok and mode == 't' and ttl then
    redis.call('PEXPIRE', lock, math.max(1, ttl))
  else
    redis.call('DEL', lock)
  end
end
