--@include missing
local function check_text(name, v)
  if not v or v == '' then return missing(name, v) end
  return nil
end
