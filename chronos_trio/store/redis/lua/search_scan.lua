-- search_scan.lua: ONE window of a job search in ONE partition's index (read only).
--
-- KEYS[1]  the state index (zset) to walk
-- KEYS[2]  the partition's job key prefix (job key = prefix .. id)
-- ARGV[1]  rank of the window's first entry
-- ARGV[2]  entries to read (the window; the caller keeps it small)
-- ARGV[3]  states a record may be in, comma-separated ('' : any)
-- ARGV[4]  kind ('' : any)
-- ARGV[5]  error text, ASCII-lowered ('' : any): a substring of lower(last_error)
-- ARGV[6]  payload text ('' : any): a substring of the payload
-- ARGV[7]  worker ('' : any): the lease owner, or ARGV[8] in the attempt history
-- ARGV[8]  the worker as the history writes it (a JSON string)
-- ARGV[9]  created_at from ('' : open; each time bound below the same)
-- ARGV[10] created_at before
-- ARGV[11] finished_at from
-- ARGV[12] finished_at before
-- ARGV[13] run_at from
-- ARGV[14] run_at before
--
-- A coarse filter, never the judge: it drops a record only when a field it
-- reads proves the record cannot match, and keeps every record it cannot
-- judge (a field missing or not a number, a chunked payload), which the
-- client reads whole and judges (store._search.matches). An index entry
-- with no hash behind it (the leased sentinel) is read but not kept; a key
-- of the wrong type is kept (the client shows it damaged). Lua's lower()
-- folds ASCII letters only: the search's rule.
--
-- Returns {entries read, offset, id, offset, id, ...}: the ids that may match, in
-- index order, each after its offset in the window (0: its first entry).
local entries = redis.pcall('ZRANGE', KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1)
if entries.err then return {0} end
local states = {}
local any_state = ARGV[3] == ''
for s in string.gmatch(ARGV[3], '[^,]+') do states[s] = true end
local kind, err, payload, worker, worker_json = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]

local function outside(value, from, before)
  -- true only when ``value`` is a number proven outside [from, before)
  if from == '' and before == '' then return false end
  local x = tonumber(value)
  if x == nil then return false end
  if from ~= '' and x < tonumber(from) then return true end
  if before ~= '' and x >= tonumber(before) then return true end
  return false
end

local out = {#entries}
for i, id in ipairs(entries) do
  local f = redis.pcall('HMGET', KEYS[2] .. id, 'state', 'kind', 'last_error', 'payload', 'pn',
    'lease_owner', 'ah', 'created_at', 'finished_at', 'run_at')
  local keep = true
  if f.err then
    keep = true
  elseif not f[1] and not f[2] and not f[4] then
    keep = false  -- no record: the leased sentinel, or an entry the checker reports
  else
    if f[1] and not any_state and not states[f[1]] then keep = false end
    if keep and kind ~= '' and f[2] and f[2] ~= kind then keep = false end
    if keep and err ~= '' and not string.find(string.lower(f[3] or ''), err, 1, true) then
      keep = false
    end
    if keep and payload ~= '' and f[4] and not f[5] and not string.find(f[4], payload, 1, true) then
      keep = false
    end
    if keep and worker ~= '' and f[6] ~= worker
        and not (f[7] and string.find(f[7], worker_json, 1, true)) then
      keep = false
    end
    if keep and (outside(f[8], ARGV[9], ARGV[10]) or outside(f[9], ARGV[11], ARGV[12])
        or outside(f[10], ARGV[13], ARGV[14])) then
      keep = false
    end
  end
  if keep then
    out[#out + 1] = i - 1
    out[#out + 1] = id
  end
end
return out
