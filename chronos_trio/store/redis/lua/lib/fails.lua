--@include failure_mark
-- Whether extras x carry a workflow continuation that holds failure handling
-- (it starts with FAILURE_MARK, see records/_workflow.py): a dead end of its
-- job goes to the outbox, for the continuer to call its on_failure callback
-- or record its failed arrival.
local function fails(x)
  if not x then return false end
  local z = string.find(x, '\0', 1, true)
  return z ~= nil and string.sub(x, z + 1, z + #FAILURE_MARK) == FAILURE_MARK
end
