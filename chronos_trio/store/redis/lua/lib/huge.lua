-- math.huge, read once: the bound of a finite number.
local HUGE = math.huge
