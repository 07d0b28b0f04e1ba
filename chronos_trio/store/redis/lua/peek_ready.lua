-- peek_ready.lua: the due times of the first ARGV[1] entries of ONE ready
-- zset, run-length encoded: what a lease over several partitions of a
-- Cluster needs to split its count among them in one order by due time,
-- without sending the entries themselves. Reads only.
--
-- KEYS[1]  ready zset (score = run_at)
-- ARGV[1]  how many entries (> 0)
-- ARGV[2]  (optional, default 0) how many entries at the head to pass over
--          (what a lease's earlier round held back)
-- ARGV[3]  (optional, default ARGV[1]) read no further once this many
--          entries are described: entries of distinct due times cost a
--          formatted score each, read here and sent, and a lease over 8
--          partitions takes only about an eighth of its count from each.
--          The runs counted first (see below) may describe more.
--
-- Runs of one due time are common (the jobs of one enqueue_many call share
-- theirs): a run costs a ZRANGE of one entry and a ZCOUNT. After four runs
-- the rest is read at once and encoded here.
--
-- Includes no piece (it reads no job record). A key of another type
-- is an error reply.
--
-- Returns {cut, score_1, n_1, score_2, n_2, ...}: the first n_1 entries
-- (after the ARGV[2] passed over) have the score score_1 (as Redis writes
-- it), the next n_2 entries score_2, and so on; the counts add up to the
-- smaller of ARGV[1] and the number of entries after those passed over,
-- unless cut is 1: then reading stopped at ARGV[3] and more entries may
-- follow (cut is 0 otherwise).
local want = tonumber(ARGV[1])
local skip = tonumber(ARGV[2] or '0')
local cap = tonumber(ARGV[3] or '') or want
local out, taken = {0}, 0
while taken < want and #out < 9 do
  local head = redis.call('ZRANGE', KEYS[1], skip + taken, skip + taken, 'WITHSCORES')
  if not head[2] then return out end
  -- every entry before rank skip + taken scores lower or the same
  local n = redis.call('ZCOUNT', KEYS[1], '-inf', head[2]) - skip - taken
  if n > want - taken then n = want - taken end
  out[#out + 1] = head[2]
  out[#out + 1] = n
  taken = taken + n
end
local stop = math.min(want, math.max(taken, cap))
if taken < stop then
  local rest = redis.call('ZRANGE', KEYS[1], skip + taken, skip + stop - 1, 'WITHSCORES')
  if stop < want and #rest == 2 * (stop - taken) then out[1] = 1 end
  for i = 2, #rest, 2 do
    if rest[i] == out[#out - 1] then
      out[#out] = out[#out] + 1
    else
      out[#out + 1] = rest[i]
      out[#out + 1] = 1
    end
  end
elseif taken < want then
  out[1] = 1  -- the runs counted reached ARGV[3]: the rest is not read
end
return out
