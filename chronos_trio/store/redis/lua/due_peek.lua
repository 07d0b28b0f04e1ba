-- due_peek.lua: what is due in the zsets of KEYS (of one slot) by this
-- script's own TIME: what a promotion or recovery over several partitions
-- of a Cluster needs to split its limit among them in one order (by due
-- time or lease expiry), judged by the store's clock, never a client's
-- estimate of it. (On a single node promote.lua and recover_peek.lua do
-- this over every partition in one call.) Reads only; decides nothing:
-- promote.lua and recover.lua judge every entry again by their own TIME.
--
-- KEYS[i]  a zset (score = a due time, or a lease expiry)
-- ARGV[1]  limit (> 0): how many due entries of each zset, at most
--
-- Reads no job record. A key of another type reads as empty (the script
-- that would write it then fails alone).
--
-- Returns {now, then per key in KEYS order: {its first score ('' when it
-- is empty), then the scores of its first ARGV[1] entries scored <= now}}.
--@include clock
local now, now_s = clock()
local out = {now_s}
for i = 1, #KEYS do
  local got = {''}
  local first = redis.pcall('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if not first.err and first[2] then
    got[1] = first[2]
    if tonumber(first[2]) <= now then
      local due = redis.call('ZRANGE', KEYS[i], '-inf', now_s, 'BYSCORE', 'LIMIT', 0,
        tonumber(ARGV[1]), 'WITHSCORES')
      for k = 2, #due, 2 do got[#got + 1] = due[k] end
    end
  end
  out[i + 1] = got
end
return out
