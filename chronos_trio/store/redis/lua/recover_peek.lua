-- recover_peek.lua: how many expired leases recovery takes from each of the
-- partitions in KEYS (one or more, of one or more queues), earliest expiry
-- first, in one call: a single node's recovery pass is this one round trip
-- (then recover.lua, per partition with a share, only when some lease
-- expired). On a Cluster, whose scripts touch one slot, the client peeks
-- with due_peek.lua per partition instead (each by its node's own TIME).
--
-- KEYS[i]  leased zset of partition i (score = lease expiry, plus the
--          sentinel member LEASED_SENTINEL with score +inf, see lease.lua)
-- ARGV[1]  limit (> 0): expired leases to take, at most, over all groups
-- ARGV[2+g], per group g = 0, 1, ...: how many partitions (in KEYS order) it
--          has. The limit goes to the first group's expired leases, in one
--          order by expiry across its partitions (see
--          lib/earliest.lua), what is left of it to the next group, and so on.
--
-- An idle queue costs one EXISTS: a leased zset holding nothing but the
-- sentinel holds no lease, so settle.lua deletes it once its last lease is
-- settled (lib/drop_idle_leased.lua), and so does this peek when it
-- meets one (recover.lua leaves it; lease.lua writes the sentinel again,
-- first, with the next lease it records there). When none of KEYS exists,
-- no partition holds a lease: TIME is not even read. A key of another type
-- is skipped (share 0), as a plain read of it would be.
--
-- This decides nothing: recover.lua judges every expiry by its own TIME.
--
-- Returns {now ('' when no key of KEYS exists), share_1, share_2, ...}, a
-- share per partition in KEYS order.
--@include clock
--@include earliest
--@include leased_sentinel
local out = {''}
for i = 1, #KEYS do out[i + 1] = 0 end
if redis.call('EXISTS', unpack(KEYS)) == 0 then return out end
local now, now_s = clock()
out[1] = now_s
local p0 = 0
-- earliest's head and upto over the partitions p0 + 1 .. p0 + size
local function head(s, rank)
  local key = KEYS[p0 + s]
  local got = redis.pcall('ZRANGE', key, rank, rank, 'WITHSCORES')
  if got.err then return nil end  -- not a zset: skipped
  if rank == 0 and got[1] == LEASED_SENTINEL and redis.call('ZCARD', key) == 1 then
    redis.call('DEL', key)  -- the sentinel alone: no lease here
    return nil
  end
  local score = got[2]
  if score and tonumber(score) <= now then return score end
  return nil
end
local function upto(s, score)
  return redis.call('ZCOUNT', KEYS[p0 + s], '-inf', score or now_s)
end

local remaining = tonumber(ARGV[1])
for g = 2, #ARGV do
  local size = tonumber(ARGV[g])
  if remaining > 0 then
    local took = earliest(size, remaining, head, upto)
    for s = 1, size do
      local n = took[s]
      -- earliest gives a lone source all that is wanted: count what it has
      if n > 0 then n = math.min(n, upto(s, nil)) end
      out[p0 + s + 1] = n
      remaining = remaining - n
    end
  end
  p0 = p0 + size
end
return out
