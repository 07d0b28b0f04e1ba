-- The set of the concurrency limits (their zset keys) a lease held a job back
-- for, beside the job key prefix: a settle that frees one of their slots wakes
-- idle leasers, and only then (a unique job frees its key's run slot with
-- every settle: most of those no job waits for).
local function waiting_key(prefix)
  return string.sub(prefix, 1, -3) .. 'waiting'
end

-- Give back the slots release_slots queued; how many of them freed a limit
-- that a lease held a job back for (each such limit leaves the waiting set:
-- the lease that finds it taken again puts it back).
local function give_back_slots(gone, prefix)
  local freed = 0
  local waiting = waiting_key(prefix)
  for k, ids in pairs(gone) do
    local n = 0
    for c = 1, #ids, 1000 do
      -- pcall: a key of another type holds no slot (lease replaces it), and
      -- must not stop a settle after its writes
      local got = redis.pcall('ZREM', k, unpack(ids, c, math.min(c + 999, #ids)))
      if type(got) == 'number' then n = n + got end
    end
    if n > 0 and redis.pcall('SREM', waiting, k) == 1 then freed = freed + n end
  end
  return freed
end
