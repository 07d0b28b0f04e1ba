-- outbox_read.lua: the oldest workflow continuations of ONE partition
-- (read-only but for entries whose job is gone, which leave the outbox).
--
-- KEYS[1]  outbox zset of the partition (score = when the job succeeded)
-- KEYS[2]  job key prefix: the job hash of ID x is KEYS[2]..x
-- ARGV[1]  how many entries at most
--
-- Returns {id_1, continuation_1, result_1, state_1, last_error_1, attempts_1,
-- kind_1, kept_1, ...}: result false when none is kept; kept 1 when the
-- entry is a deleted job's, read from its gone key (lib/keep_flow_place.lua:
-- read only when the job hash is not an end; the continuer deletes it with
-- the entry), else 0. An entry whose record is gone (trimmed, deleted, with
-- no gone key), carries no continuation, or is neither succeeded, dead nor
-- aborted (re-run since: its next end puts it back) is removed: there is
-- nothing to continue now. A dead or aborted entry is a failure.
local function read(key)
  local f = redis.pcall('HMGET', key, 'x', 'result', 'state', 'last_error', 'attempts', 'kind')
  local x = (not f.err) and f[1] or nil
  local z = x and string.find(x, '\0', 1, true)
  if z and z < #x and (f[3] == 'succeeded' or f[3] == 'dead' or f[3] == 'aborted') then
    return f, x, z
  end
end
local kept_prefix = string.sub(KEYS[2], 1, -3) .. 'gone:'
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out, gone = {}, {}
for _, id in ipairs(ids) do
  local kept = 0
  local f, x, z = read(KEYS[2] .. id)
  if not f then
    f, x, z = read(kept_prefix .. id)
    kept = 1
  end
  if f then
    out[#out + 1] = id
    out[#out + 1] = string.sub(x, z + 1)
    out[#out + 1] = f[2] or false
    out[#out + 1] = f[3]
    out[#out + 1] = f[4] or ''
    out[#out + 1] = f[5] or '0'
    out[#out + 1] = f[6] or ''
    out[#out + 1] = kept
  else
    gone[#gone + 1] = id
  end
end
if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
return out
