-- The list (a table) map holds under key, made and stored there empty when
-- there is none yet: for what a batch gathers per key (a zset's ids or
-- entries) to write with one call per key.
local function list_of(map, key)
  local got = map[key]
  if not got then
    got = {}
    map[key] = got
  end
  return got
end
