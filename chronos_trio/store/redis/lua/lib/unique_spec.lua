-- A job's extras, as enqueue.lua takes them and its record keeps them in
-- field x: its unique spec, a NUL byte, its workflow continuation (either
-- may be empty). The unique spec: mode letter, lock ttl in ms (none: no
-- digits), '|', key. unique_spec returns key, mode, ttl (a number or nil);
-- nil for none (or a damaged x).
local function unique_spec(x)
  if not x then return nil end
  local mode, ttl, key = string.match(x, '^([ltd])(%d*)|([^%z]+)%z')
  return key, mode, tonumber(ttl)
end
