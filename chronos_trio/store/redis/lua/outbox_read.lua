-- outbox_read.lua: the oldest workflow continuations of ONE partition
-- (read-only but for entries whose job is gone, which leave the outbox).
--
-- KEYS[1]  outbox zset of the partition (score = when the job succeeded)
-- KEYS[2]  job key prefix: the job hash of ID x is KEYS[2]..x
-- ARGV[1]  how many entries at most
--
-- Returns {id_1, continuation_1, result_1, state_1, last_error_1, attempts_1,
-- kind_1, ...}: result false when none is kept. An entry whose record is gone
-- (trimmed, deleted), carries no continuation, or is neither succeeded nor
-- dead (re-run since: its next end puts it back) is removed: there is
-- nothing to continue now.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out, gone = {}, {}
for _, id in ipairs(ids) do
  local f = redis.pcall('HMGET', KEYS[2] .. id, 'x', 'result', 'state', 'last_error',
    'attempts', 'kind')
  local x = (not f.err) and f[1] or nil
  local z = x and string.find(x, '\0', 1, true)
  if z and z < #x and (f[3] == 'succeeded' or f[3] == 'dead') then
    out[#out + 1] = id
    out[#out + 1] = string.sub(x, z + 1)
    out[#out + 1] = f[2] or false
    out[#out + 1] = f[3]
    out[#out + 1] = f[4] or ''
    out[#out + 1] = f[5] or '0'
    out[#out + 1] = f[6] or ''
  else
    gone[#gone + 1] = id
  end
end
if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
return out
