-- The unique lock of key u in the partition whose job key prefix is prefix
-- (keys.py: <tag>:u:<key> beside <tag>:j:<id>). Its value is the mode's
-- letter (l lock, t throttle, d debounce) then the holder's ID.
local function lock_key(prefix, u)
  return string.sub(prefix, 1, -3) .. 'u:' .. u
end
