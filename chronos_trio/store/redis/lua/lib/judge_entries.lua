--@include read_job
--@include check_format
--@include check_state
-- Judge the entries ids of the index of jobs in state (named state in the
-- reasons too) by their records, the job hash of ID x being prefix..x;
-- nothing here can fail, and nothing is written. Returns plan and why, per
-- entry: 'gone' (no job hash; why: the reason, for quarantine), 'newer' (a
-- newer format, left untouched; why: its v), 'bad' (state not that of the
-- index, or an unreadable format; why: the reason, for dead_letter) or 'ok'.
-- aborted: the plan of a readable aborted record (the dead index keeps
-- aborted jobs too), or nil to judge it as any other.
local function judge_entries(prefix, ids, state, aborted)
  local plan, why = {}, {}
  for k, id in ipairs(ids) do
    local f, none = read_job(prefix .. id, 'v', 'state')
    if not f then
      plan[k], why[k] = 'gone', none
    else
      local bad = check_format(f[1])
      if bad == 'newer' then
        plan[k], why[k] = 'newer', f[1]
      elseif not bad and aborted and f[2] == 'aborted' then
        plan[k] = aborted
      else
        bad = bad or check_state(f[2], state, state)
        plan[k], why[k] = bad and 'bad' or 'ok', bad
      end
    end
  end
  return plan, why
end
