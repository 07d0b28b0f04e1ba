-- The outbox of the partition whose job key prefix is prefix: a zset of
-- workflow jobs that succeeded (score: when), drained by the continuer.
local function outbox_key(prefix)
  return string.sub(prefix, 1, -3) .. 'outbox'
end
