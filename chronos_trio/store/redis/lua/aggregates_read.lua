-- aggregates_read.lua: ONE queue's per-minute aggregates from a minute on,
-- up to the store's current minute (see aggregates_add.lua for the hashes).
--
-- KEYS[1]  the queue's aggregates prefix (as aggregates_add.lua)
-- ARGV[1]  the first minute to read (epoch seconds of its start)
--
-- Minutes older than the longest keep are gone by expiry; reading starts
-- no earlier than 31 days back (records._aggregates.MAX_KEEP). A key of
-- another type is skipped.
--
-- Returns {minute, {field, value, ...}, minute, {...}, ...} for the minutes
-- that hold counts, oldest first.
--@include clock
local now = clock()
local last = math.floor(now / 60) * 60
local first = math.max(tonumber(ARGV[1]), last - 31 * 86400 - 60)
first = math.floor(first / 60) * 60
local out = {}
for m = first, last, 60 do
  local ok, fields = pcall(redis.call, 'HGETALL', KEYS[1] .. m)
  if ok and #fields > 0 then
    out[#out + 1] = m
    out[#out + 1] = fields
  end
end
return out
