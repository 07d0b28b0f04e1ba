--@include find
--@include huge
--@include show
--@include missing
-- nil and the number when v is a finite number, else why not: the texts
-- store/_record_rules.py's parse_number reads (tonumber also reads
-- hexadecimal, which Python's float() refuses: not a number here either).
local function check_number(name, v)
  local x = tonumber(v)
  if x and x == x and x ~= HUGE and x ~= -HUGE and not find(v, '[xX]') then return nil, x end
  if not v or v == '' then return missing(name, v) end
  return "field '" .. name .. "' holds " .. show(v) .. ', not a number'
end
