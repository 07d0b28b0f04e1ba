--@include read_job
--@include check_format
--@include newer
-- Read the job hash key of job id for a script about that one job (abort,
-- delete, run_now): its fields v, state and the other fields named (see
-- read_job), and why its format is unreadable (nil: it is readable). Or nil,
-- nil and the script's reply code when there is nothing to do: 0 no job hash
-- (no key, or a key of another type), 3 a record of a newer format (noted
-- in aside, left untouched). Nothing here can fail.
local function read_one(aside, key, id, ...)
  local f = read_job(key, 'v', 'state', ...)
  if not f then return nil, nil, 0 end
  local bad = check_format(f[1])
  if bad == 'newer' then
    newer(aside, id, f[1])
    return nil, nil, 3
  end
  return f, bad, nil
end
