--@include find
-- Whether v is a count as check_count accepts it (the hot loops' cheap test).
local function is_count(v)
  return v and #v <= 15 and find(v, '^%d+$') ~= nil
end
