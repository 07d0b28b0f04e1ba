-- The aborted marks of the partition whose job key prefix is prefix: a zset
-- of the aborted jobs among the dead index's entries (an aborted job is kept
-- there, like a dead one), score its finished_at as in the dead index, so
-- they are counted and listed without reading every dead record. A mark
-- counts only while the dead index holds its job with the same score: one
-- whose job was trimmed or deleted since is stale (marks older than the
-- oldest dead entry are dropped by trim.lua and with the next abort).
local function aborted_key(prefix)
  return string.sub(prefix, 1, -3) .. 'aborted'
end
