local function missing(name, v)
  if v == false or v == nil then return "field '" .. name .. "' is missing" end
  return "field '" .. name .. "' is empty"
end
