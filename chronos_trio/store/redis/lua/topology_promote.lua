-- topology_promote.lua: make a new version of one queue active; the active one
-- becomes draining. Single key: the global topology hash.
--
-- KEYS[1]  topology hash: field = queue name, value = versions encoded as
--          "version:partitions:state,..." with state 'a' (active) or 'd' (draining)
-- ARGV[1]  queue name
-- ARGV[2]  new version (integer)
-- ARGV[3]  its partition count (integer >= 1)
-- ARGV[4]  default partition count, for a queue never configured (version 1)
--
-- A stored encoding that is not a list of such items (versions and
-- partition counts >= 1, at most one active) is damaged: nothing changes.
--
-- Returns {1, new encoding}, {0, highest existing version} when ARGV[2] is
-- not greater than every existing version (nothing changes), or
-- {0, 'damaged', stored encoding} (nothing changes).
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then cur = '1:' .. ARGV[4] .. ':a' end
local active = 0
for item in string.gmatch(cur .. ',', '([^,]*),') do
  local v, p, s = string.match(item, '^(%d+):(%d+):([ad])$')
  if not v or tonumber(v) < 1 or tonumber(p) < 1 or #v > 9 or #p > 9 then
    return {0, 'damaged', cur}
  end
  if s == 'a' then active = active + 1 end
end
if active > 1 then return {0, 'damaged', cur} end
local highest = 0
local parts = {}
for v, p, s in string.gmatch(cur, '(%d+):(%d+):(%a)') do
  if tonumber(v) > highest then highest = tonumber(v) end
  if s == 'a' then s = 'd' end
  parts[#parts + 1] = v .. ':' .. p .. ':' .. s
end
if tonumber(ARGV[2]) <= highest then return {0, highest} end
parts[#parts + 1] = ARGV[2] .. ':' .. ARGV[3] .. ':a'
local enc = table.concat(parts, ',')
redis.call('HSET', KEYS[1], ARGV[1], enc)
return {1, enc}
