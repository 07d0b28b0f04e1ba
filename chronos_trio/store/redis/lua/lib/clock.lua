-- The store's time, Redis TIME (never a client's clock): epoch seconds,
-- and the same as text, as every script writes a time ('%.17g': a double
-- written so that it reads back exactly).
local function clock()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  return now, string.format('%.17g', now)
end
