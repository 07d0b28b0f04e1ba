--@include chunks
--@include find
--@include show
--@include missing
-- The payload of the job hash at key (a hash: the caller has read it) from
-- its payload and pn fields: the payload, or nil and why it cannot be joined
-- (the same texts as join_payload in _codec.py).
local function join_payload(key, first, pn)
  if not pn then return first, nil end
  local n = tonumber(pn)
  if #pn > 2 or not find(pn, '^%d+$') or n < 1 or n > MAX_CHUNKS then
    return nil, "field 'pn' holds " .. show(pn) .. ', not a payload chunk count'
  end
  if not first then return nil, missing('payload', first) end
  local names = {}
  for k = 1, n do names[k] = 'p' .. k end
  local c = redis.call('HMGET', key, unpack(names))
  for k = 1, n do
    if not c[k] then return nil, "field 'p" .. k .. "' is missing" end
  end
  return first .. table.concat(c), nil
end
