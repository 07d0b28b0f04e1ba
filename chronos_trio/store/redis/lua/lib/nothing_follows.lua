-- Whether extras x carry a workflow continuation that asks for nothing
-- (records/_workflow.py's nothing_follows, the same texts: a flow's last
-- step's, its workflow's ID after the flow's headers if it has any; a
-- failure callback's, none): its success writes no outbox entry, its record
-- kept all the same.
local function nothing_follows(x)
  if not x then return false end
  local z = string.find(x, '\0', 1, true)
  if not z then return false end
  local t = string.sub(x, z + 1)
  return t == '{}' or string.find(t, '^{"wf":"[^"\\]*"}$') ~= nil
    or string.find(t, '^{"h":{[^{}]*},"wf":"[^"\\]*"}$') ~= nil
end
