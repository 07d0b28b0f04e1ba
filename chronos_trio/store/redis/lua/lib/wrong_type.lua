-- Why one of the keys a script writes holds another type ('zset' or 'hash'
-- expected; 'none' is fine), or nil. A script checks before its first
-- write, so a key of the wrong type fails it while nothing is written yet.
-- pairs: key, type, key, type, ...
local function wrong_type(...)
  local n = select('#', ...)
  for i = 1, n, 2 do
    local key, want = select(i, ...)
    local t = redis.call('TYPE', key).ok
    if t ~= want and t ~= 'none' then
      return 'key ' .. key .. ' holds a ' .. t .. ', not a ' .. want .. ': nothing done'
    end
  end
  return nil
end
