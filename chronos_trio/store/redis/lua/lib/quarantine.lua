-- Record an index entry without a usable job hash (the caller removes the entry).
local function quarantine(aside, damaged_hash, id, reason, index, now)
  redis.call('HSET', damaged_hash, id, cjson.encode({reason = reason, at = now, index = index}))
  local q = aside[2]
  q[#q + 1] = id
  q[#q + 1] = reason
end
