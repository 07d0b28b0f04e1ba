-- Flow control (records/_control.py): a job's field fc, items separated by
-- newlines: p<priority> (first when present), c<limit>/<key> per
-- concurrency limit, r<count>/<per s>/<burst>/<key> per rate limit,
-- e<epoch s> its expiry. A limit's state lives beside the job, in its
-- partition's slot: <tag>:rl:<key> (string: the GCRA's theoretical arrival
-- time) and <tag>:cap:<key> (zset: holder id, score = its lease expiry).
-- One priority level moves a ready score this many seconds earlier (more
-- than any due time spans): ready jobs order by priority, then due time.
local PRIO_STEP = 1e10

local function priority_of(fc)
  if not fc then return 0 end
  return tonumber(string.match(fc, '^p(%-?%d+)')) or 0
end

-- The ready score of a job due at run_at (as stored, or a number) with flow
-- control fc: run_at itself at priority 0.
local function ready_score(run_at, fc)
  local p = priority_of(fc)
  if p == 0 then return run_at end
  return string.format('%.17g', tonumber(run_at) - p * PRIO_STEP)
end
