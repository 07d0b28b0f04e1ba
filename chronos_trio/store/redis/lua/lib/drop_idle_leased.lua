--@include leased_sentinel
-- Delete the leased zset of a partition when it holds nothing but the
-- sentinel (LEASED_SENTINEL, see lease.lua): no lease is left there. An idle
-- partition then has no leased key at all, so recovery's peek
-- (recover_peek.lua) tells that no partition holds a lease with one EXISTS
-- over all of them; lease.lua writes the sentinel again, first, with the
-- next lease it records. One ZCARD, and a ZSCORE when one member is left.
local function drop_idle_leased(leased)
  if redis.call('ZCARD', leased) == 1 and redis.call('ZSCORE', leased, LEASED_SENTINEL) then
    redis.call('DEL', leased)
  end
end
