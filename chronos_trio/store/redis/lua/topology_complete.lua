-- topology_complete.lua: remove a draining version from one queue's topology.
-- The client has already closed every partition of that version (each checked
-- empty by close_partition.lua). Single key: the global topology hash.
--
-- KEYS[1]  topology hash (see topology_promote.lua for the encoding)
-- ARGV[1]  queue name
-- ARGV[2]  version to remove
-- ARGV[3]  default partition count, for a queue never configured
--
-- A stored encoding that is not a list of version:partitions:a|d items is
-- damaged: nothing changes.
--
-- Returns {1, new encoding}, or {0, 'unknown'} / {0, 'active'} /
-- {0, 'damaged', stored encoding} (nothing changes).
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then cur = '1:' .. ARGV[3] .. ':a' end
for item in string.gmatch(cur .. ',', '([^,]*),') do
  local v, p = string.match(item, '^(%d+):(%d+):[ad]$')
  if not v or tonumber(v) < 1 or tonumber(p) < 1 or #v > 9 or #p > 9 then
    return {0, 'damaged', cur}
  end
end
local parts = {}
local found = nil
for v, p, s in string.gmatch(cur, '(%d+):(%d+):(%a)') do
  if v == ARGV[2] then
    found = s
  else
    parts[#parts + 1] = v .. ':' .. p .. ':' .. s
  end
end
if not found then return {0, 'unknown'} end
if found == 'a' then return {0, 'active'} end
local enc = table.concat(parts, ',')
redis.call('HSET', KEYS[1], ARGV[1], enc)
return {1, enc}
