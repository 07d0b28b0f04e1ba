-- The score of the entry at rank (0-based) of zset key, as Redis wrote it
-- (a string), nil when it has none; or nil and why when key holds another
-- type (read with pcall: never fails).
local function rank_score(key, rank)
  local got = redis.pcall('ZRANGE', key, rank, rank, 'WITHSCORES')
  if got.err then
    return nil, 'key ' .. key .. ': ' .. tostring(got.err) .. ': nothing done'
  end
  return got[2], nil
end
