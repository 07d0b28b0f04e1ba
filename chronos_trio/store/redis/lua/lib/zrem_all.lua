-- ZREM ids (a list) from zset, in chunks below Lua's unpack() limit.
local function zrem_all(zset, ids)
  for c = 1, #ids, 1000 do
    redis.call('ZREM', zset, unpack(ids, c, math.min(c + 999, #ids)))
  end
end
