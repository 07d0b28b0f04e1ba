--@include show
--@include missing
-- The state check: nil when the record says it is in the index it was found in.
local function check_state(v, expected, index)
  if not v or v == '' then return missing('state', v) end
  if v ~= expected then
    return "field 'state' holds " .. show(v) .. ', but the job is in the ' .. index .. ' index'
  end
  return nil
end
