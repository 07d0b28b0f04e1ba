--@include format
--@include format_number
--@include find
--@include show
-- The record format of field v: nil = readable by this version (v absent
-- means format 1, written before formats were recorded), 'newer', or why v is
-- unreadable.
local function check_format(v)
  if not v or v == FORMAT_S then return nil end
  if #v <= 9 and find(v, '^%d+$') then
    local n = tonumber(v)
    if n > FORMAT then return 'newer' end
    if n >= 1 then return nil end
  end
  return "field 'v' holds " .. show(v) .. ', not a record format'
end
