--@include chunk_sizes
--@include format
-- Write a success into the leased job hash at key (settle.lua, kind 's',
-- after judging it ours): state succeeded, finished_at now_s and, when result
-- is not nil, result and result_until until_s; then, when expire_ms is not
-- nil, the record expires in expire_ms (ms).
--
-- compact: false (the store's default) writes the record in place, its
-- three lease fields emptied, as every earlier version did. True (the
-- store's compact_succeeded, and the record is kept a while: for its
-- result, or retained): the lease fields are dropped, not emptied (a reader
-- takes an absent field as an empty one and judges them only in the leased
-- state, store/_record_rules.py, so every reader of record format 2 reads
-- both alike), and the record may be written again compactly: Redis
-- never turns a hashtable back into a listpack, and a job due at once holds
-- its payload whole, so the record of one whose payload is over CHUNK bytes
-- (hash-max-listpack-value) is a hashtable, more than twice the memory. Such
-- a record whose values all fit in CHUNK bytes but the payload (at most
-- CHUNKED_MAX) is written again whole, in this same step (HGETALL, DEL, one
-- HSET): its other fields as they were, the payload in chunks as enqueue.lua
-- writes a delayed job's (lib/chunks.lua: every reader of format 2 joins them,
-- in any state; a record without v, format 1, whose payload is chunked here
-- gets v = 2), so Redis builds a listpack. A result (or any other value)
-- over CHUNK bytes would make it a hashtable anyway: such a record is written
-- in place, as is one that is a listpack already. A result is never chunked:
-- older readers read it whole.
-- w, x: the record's fields w and x (read by the caller: a long one spares
-- the reading). Nothing here can fail: the key is a hash (the caller read
-- it), and the HSET after the DEL writes a new key.
local LEASE_FIELDS = {'lease_token', 'lease_owner', 'lease_expires_at'}
-- The fields not copied into the rewritten record: the lease's, and those
-- the success writes (v is copied apart: see below).
local NOT_COPIED = {lease_token = true, lease_owner = true, lease_expires_at = true,
  state = true, finished_at = true, result = true, result_until = true}
-- Redis's default hash-max-listpack-entries: more fields make a hashtable.
local LISTPACK_ENTRIES = 128

-- Whether value v (a string or nil) fits a listpack.
local function fits(v)
  return not v or #v <= CHUNK
end

-- The success written as a new listpack record (see above): true, or false
-- when the record is not a hashtable or could not become a listpack (then
-- nothing is written).
local function rewrite_compact(key, now_s, result, until_s)
  if redis.call('OBJECT', 'ENCODING', key) ~= 'hashtable' then return false end
  -- the fields copied are moved down in place in the reply
  local args = redis.call('HGETALL', key)
  local a, payload, chunked, v = 0, nil, false, nil
  for i = 1, #args, 2 do
    local name, value = args[i], args[i + 1]
    if name == 'v' then
      v = value
    elseif not NOT_COPIED[name] then
      if #value <= CHUNK and #name <= CHUNK then
        args[a + 1], args[a + 2] = name, value
        a = a + 2
        if name == 'pn' then chunked = true end
      elseif name == 'payload' and #value <= CHUNKED_MAX then
        payload = value
      else
        return false
      end
    end
  end
  if payload then
    -- a payload over CHUNK bytes beside a chunk count is not one enqueue
    -- wrote: left as it is
    if chunked then return false end
    args[a + 1], args[a + 2] = 'payload', string.sub(payload, 1, CHUNK)
    a = a + 2
    local n = 0
    for start = CHUNK + 1, #payload, CHUNK do
      n = n + 1
      args[a + 1], args[a + 2] = 'p' .. n, string.sub(payload, start, start + CHUNK - 1)
      a = a + 2
    end
    args[a + 1], args[a + 2] = 'pn', tostring(n)
    a = a + 2
  end
  -- chunks are format 2's: a record without v (format 1, from a producer
  -- older than formats) whose payload is chunked here is marked so, as
  -- enqueue.lua marks every record
  if payload then v = FORMAT_S end
  if v then
    args[a + 1], args[a + 2] = 'v', v
    a = a + 2
  end
  args[a + 1], args[a + 2], args[a + 3], args[a + 4] = 'state', 'succeeded', 'finished_at', now_s
  a = a + 4
  if result then
    args[a + 1], args[a + 2], args[a + 3], args[a + 4] = 'result', result, 'result_until', until_s
    a = a + 4
  end
  if a / 2 > LISTPACK_ENTRIES then return false end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(args, 1, a))
  return true
end

local function succeed_record(key, now_s, result, until_s, expire_ms, compact, w, x)
  if not compact then
    -- the store's default (compact_succeeded off): written in place, the
    -- lease fields emptied, no more work than the success itself
    if result then
      redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s,
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '',
        'result', result, 'result_until', until_s)
    else
      redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s,
        'lease_token', '', 'lease_owner', '', 'lease_expires_at', '')
    end
  elseif not (fits(result) and fits(w) and fits(x)
      and rewrite_compact(key, now_s, result, until_s)) then
    redis.call('HDEL', key, unpack(LEASE_FIELDS))
    if result then
      redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s, 'result', result,
        'result_until', until_s)
    else
      redis.call('HSET', key, 'state', 'succeeded', 'finished_at', now_s)
    end
  end
  if expire_ms then redis.call('PEXPIRE', key, expire_ms) end
end
