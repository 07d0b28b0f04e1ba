-- The key of limit kind ('rl' or 'cap') named key, beside the job key prefix.
local function limit_key(prefix, kind, key)
  return string.sub(prefix, 1, -3) .. kind .. ':' .. key
end
