-- Note a record of a newer format (v), left exactly as it is.
local function newer(aside, id, v)
  local n = aside[3]
  n[#n + 1] = id
  n[#n + 1] = v
end
