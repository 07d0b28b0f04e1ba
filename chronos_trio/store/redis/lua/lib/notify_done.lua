-- Wake the producers waiting on this job's outcome: a waiter names its
-- process's channel in field 'w' (watch.lua) before it blocks, so a job
-- nobody waits on publishes nothing. The message is the job's key.
local function notify_done(key, w)
  if w then redis.call('PUBLISH', w, key) end
end
