--@include format
-- What enqueue.lua does for a plain job, the common one: no extras (no
-- unique key, no workflow, no flow control) and a payload stored whole.
-- Such a job needs its record written (write_record) and its ID put in the
-- partition's ready or scheduled zset, its due time the score; nothing else
-- (the wake-up is the client's XADD). In a call of several jobs the zset
-- entries of plain jobs are gathered and added by one ZADD per zset
-- (index_add): a call from Lua costs Redis more than the entry.

-- The key named name (say 'retry') of the partition whose job key prefix
-- is prefix ('<tag>:j:'): a key of the same hash tag, so of the same slot.
local function beside(prefix, name)
  return string.sub(prefix, 1, -3) .. name
end

-- Writes the record of the job at ARGV offset i (see enqueue.lua's header)
-- under key key: due at run_at_s (as stored), in state state, created at
-- created_s. Field order is the record's as every version wrote it: the
-- fields, then h when the job has headers.
local function write_record(key, i, run_at_s, state, created_s)
  redis.call('HSET', key, 'kind', ARGV[i + 1], 'payload', ARGV[i + 2], 'run_at', run_at_s,
    'state', state, 'attempts', '0', 'max_retries', ARGV[i + 5], 'timeout', ARGV[i + 6],
    'created_at', created_s, 'v', FORMAT_S)
  if ARGV[i + 7] ~= '' then redis.call('HSET', key, 'h', ARGV[i + 7]) end
end

-- Entries gathered for one zset at most: a ZADD's arguments (two an entry)
-- stay far below what unpack can pass (Redis's Lua stack, 8000).
local INDEX_MAX = 1000

-- Entries a zset keeps in Redis's compact listpack encoding at most (its
-- zset-max-listpack-entries, 128 by default). Each entry added to a
-- listpack zset looks through it from the start (a strtod per score), so
-- a listpack's first 128 entries cost a batch about 12 million instructions.
local LISTPACK_MAX = 128

-- Adds to zset the first count entries of args (score, ID, score, ID, ...)
-- in one ZADD. More than LISTPACK_MAX entries leave zset a skiplist in any
-- case: it is made one before they go in (a member longer than any job ID,
-- of more than zset-max-listpack-value bytes, added and taken out again),
-- so no entry pays for a listpack. The zset then holds what one ZADD would
-- have left, in the same encoding.
local function index_add(zset, args, count)
  if count == 0 then return end
  if count <= LISTPACK_MAX then
    redis.call('ZADD', zset, unpack(args, 1, 2 * count))
    return
  end
  -- longer than a job ID can be (200 characters, 800 bytes)
  local wide = '~enqueue-skiplist~' .. string.rep('~', 800)
  local added = redis.call('ZADD', zset, 'NX', 0, wide)
  redis.call('ZADD', zset, unpack(args, 1, 2 * count))
  if added == 1 then redis.call('ZREM', zset, wide) end
end
