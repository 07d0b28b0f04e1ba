-- string.find, read once (the checks call it in hot loops).
local find = string.find
