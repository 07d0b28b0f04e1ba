-- What enqueue.lua does for every job it stores: its record written (for a
-- plain job, the common one, no extras and a payload stored whole, all of
-- it: write_record, in lib/write_record.lua) and its ID put in the partition's ready or scheduled
-- zset. The zset entries are gathered (index_later) and added by one ZADD
-- per zset (index_all): a call from Lua costs Redis more than the entry.

-- The key named name (say 'retry') of the partition whose job key prefix
-- is prefix ('<tag>:j:'): a key of the same hash tag, so of the same slot.
local function beside(prefix, name)
  return string.sub(prefix, 1, -3) .. name
end

-- Entries gathered for one zset at most: a ZADD's arguments (two an entry)
-- stay far below what unpack can pass (Redis's Lua stack, 8000).
local INDEX_MAX = 1000

-- Entries a zset keeps in Redis's compact listpack encoding at most (its
-- zset-max-listpack-entries, 128 by default). Each entry added to a
-- listpack zset looks through it from the start (a strtod per score), so
-- a listpack's first 128 entries cost a batch about 12 million instructions.
local LISTPACK_MAX = 128

-- Adds the entries gathered for zset first, then for zset second (when
-- given), each in one ZADD, and drops their buffers. More than
-- LISTPACK_MAX entries leave a zset a skiplist in any case: it is made one
-- before they go in (a member longer than any job ID, of more than
-- zset-max-listpack-value bytes, added and taken out again), so no entry
-- pays for a listpack. The zset then holds what one ZADD would have left,
-- in the same encoding (for the default zset-max-listpack-entries, 128,
-- which LISTPACK_MAX assumes). Redis 7.2 and later convert ahead in ZADD
-- itself (redis/redis#12185), so there the trick is redundant: drop it
-- when 7.2 is the minimum.
local function index_all(pending, first, second)
  local zset = first
  while zset do
    local args = pending[zset]
    if args then
      pending[zset] = nil
      if #args > 2 * LISTPACK_MAX then
        -- longer than a job ID can be (200 characters, 800 bytes)
        local wide = '~enqueue-skiplist~' .. string.rep('~', 800)
        local added = redis.call('ZADD', zset, 'NX', 0, wide)
        redis.call('ZADD', zset, unpack(args))
        if added == 1 then redis.call('ZREM', zset, wide) end
      else
        redis.call('ZADD', zset, unpack(args))
      end
    end
    if zset == second then break end
    zset = second
  end
end

-- Gathers the zset entry (score, id) of a stored job for zset: pending[zset]
-- holds the ZADD arguments gathered (score, ID, score, ID, ...), made by
-- the first entry; a full one (INDEX_MAX entries) is added at once.
local function index_later(pending, zset, score, id)
  local args = pending[zset]
  if args then
    local k = #args
    args[k + 1] = score
    args[k + 2] = id
    if k + 2 == 2 * INDEX_MAX then index_all(pending, zset) end
  else
    pending[zset] = {score, id}
  end
end
