--@include find
--@include show
--@include missing
-- nil when v is a non-negative integer in decimal digits (at most 15), else why not.
local function check_count(name, v)
  if not v or v == '' then return missing(name, v) end
  if #v > 15 or not find(v, '^%d+$') then
    return "field '" .. name .. "' holds " .. show(v) .. ', not an integer >= 0'
  end
  return nil
end
