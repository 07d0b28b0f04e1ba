-- A stored value as the Python side shows bytes: b'...', printable ASCII as
-- is, anything else escaped, cut after 40 bytes (the same text as _codec.show).
local function show(v)
  local s, tail = v, ''
  if #s > 40 then
    s, tail = string.sub(s, 1, 40), '... (' .. #v .. ' bytes)'
  end
  s = string.gsub(s, "[%c\\'\128-\255]", function(c)
    if c == '\\' then return '\\\\' end
    if c == "'" then return "\\'" end
    if c == '\n' then return '\\n' end
    if c == '\r' then return '\\r' end
    if c == '\t' then return '\\t' end
    return string.format('\\x%02x', string.byte(c))
  end)
  return "b'" .. s .. "'" .. tail
end
