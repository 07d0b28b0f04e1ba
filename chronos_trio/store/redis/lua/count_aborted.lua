-- count_aborted.lua: how many aborted jobs ONE partition keeps (read only).
--
-- KEYS[1]  dead zset (score = finished_at): aborted jobs are kept there too
-- KEYS[2]  the partition's aborted marks (zset, see lib/aborted_key.lua)
--
-- A mark counts while the dead index holds its job with the mark's score (the
-- same abort); a stale one (its job trimmed, deleted, or finished again since)
-- does not. Costs one ZSCORE per mark: the marks hold only aborted jobs (and
-- stale marks until the next abort drops those older than the dead index).
-- A key of the wrong type counts nothing.
--
-- Returns the count.
local marks = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
if marks.err then return 0 end
local n = 0
for i = 1, #marks, 2 do
  local score = redis.pcall('ZSCORE', KEYS[1], marks[i])
  if score == marks[i + 1] then n = n + 1 end
end
return n
