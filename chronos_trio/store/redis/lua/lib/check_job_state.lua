--@include show
--@include missing
-- nil when v names a job state (records/_jobs.py JobState), else why not.
local function check_job_state(v)
  if v == 'ready' or v == 'leased' or v == 'scheduled' or v == 'retry_wait'
      or v == 'succeeded' or v == 'dead' or v == 'aborted' then
    return nil
  end
  if not v or v == '' then return missing('state', v) end
  return "field 'state' holds " .. show(v) .. ', not a job state'
end
