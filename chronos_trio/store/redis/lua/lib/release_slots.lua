--@include limit_key
--@include list_of
-- The concurrency limit zsets of flow control fc beside the job key prefix
-- (a list; memo caches them per fc text for a batch).
local function slot_keys(prefix, fc, memo)
  local got = memo[fc]
  if got then return got end
  got = {}
  for item in string.gmatch(fc, '[^\n]+') do
    local key = string.match(item, '^c%d+/(.+)$')
    if key then got[#got + 1] = limit_key(prefix, 'cap', key) end
  end
  memo[fc] = got
  return got
end

-- Queue job id's concurrency slots (flow control fc) to be given back by
-- give_back_slots: into gone (zset key -> ids), one ZREM per zset per batch.
local function release_slots(prefix, id, fc, memo, gone)
  for _, k in ipairs(slot_keys(prefix, fc, memo)) do
    local ids = list_of(gone, k)
    ids[#ids + 1] = id
  end
end
