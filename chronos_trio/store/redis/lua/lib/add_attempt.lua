--@include history_limit
-- Add an attempt that ended without success to the attempt history of the
-- job hash at key (field ah; see records/_attempts.py): one line, the JSON
-- array [number, outcome, worker, started, ended, error] (times as text, ''
-- when not known; the error cut to ERROR_BYTES bytes at a character's start,
-- as _attempts.cut_error cuts it), only the last HISTORY_LIMIT lines kept. The worker is the
-- lease owner: the caller runs this before it clears the lease. ah is
-- advisory (a line that does not read is skipped by readers, never damage),
-- so whatever it holds is only appended to and cut, never judged.
local function cut_error(text)
  if #text <= ERROR_BYTES then return text end
  local p = ERROR_BYTES
  local function inside(i)  -- a UTF-8 continuation byte
    local b = string.byte(text, i)
    return b >= 0x80 and b < 0xC0
  end
  if inside(p + 1) then
    -- the first byte cut is inside a character: cut before that character
    while p > 0 and inside(p) do p = p - 1 end
    p = p - 1
  end
  return string.sub(text, 1, p)
end

local function add_attempt(key, outcome, number, started, ended_s, err)
  local owner = redis.call('HGET', key, 'lease_owner') or ''
  -- the attempt count as stored: a count, else 0 (never a number JSON lacks)
  local n = 0
  if number and #number <= 15 and string.find(number, '^%d+$') then n = tonumber(number) end
  local line = cjson.encode({n, outcome, owner, started or '', ended_s, cut_error(err or '')})
  local text = redis.call('HGET', key, 'ah')
  if text and text ~= '' then
    text = text .. '\n' .. line
    local _, n = string.gsub(text, '\n', '')
    for _ = HISTORY_LIMIT, n do
      text = string.sub(text, string.find(text, '\n', 1, true) + 1)
    end
  else
    text = line
  end
  redis.call('HSET', key, 'ah', text)
end
