-- Whether extras x carry a workflow continuation.
local function continues(x)
  if not x then return false end
  local z = string.find(x, '\0', 1, true)
  return z ~= nil and z < #x
end
