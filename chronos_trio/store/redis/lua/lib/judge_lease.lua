--@include format
--@include huge
--@include check_format
--@include check_number
-- Judge, for the lease held with token at time now, a record read as f (nil:
-- no job hash, see probe_job) whose first fields are v, state, lease_token
-- and lease_expires_at. Nothing here can fail. Returns the verdict: 1 held
-- and unexpired; 2 leased with token but damaged (w: why, an unreadable
-- format or expiry); 3 a newer format (w: its v), left untouched; 0 not held
-- (no record, another state or token, or expired: not the caller's to
-- touch). Then w, then whether the record is leased with token (the caller
-- may judge more of such a record's fields: damage there makes it a 2).
local function judge_lease(f, token, now)
  if not f then return 0, nil, false end
  local v, w = f[1], nil
  if v and v ~= FORMAT_S then w = check_format(v) end
  if w == 'newer' then return 3, v, false end
  if f[2] ~= 'leased' or token == '' or f[3] ~= token then return 0, w, false end
  local p = 0
  -- fast path: held and unexpired (not < HUGE: inf and NaN are damage)
  local until_ = tonumber(f[4])
  if not w and until_ and until_ > now and until_ < HUGE then p = 1 end
  if p == 0 then w = w or check_number('lease_expires_at', f[4]) end
  if w then p = 2 end
  return p, w, true
end
