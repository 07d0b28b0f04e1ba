-- notes_write.lua: write running jobs' notes (progress, log lines) in ONE
-- partition, each fenced by its lease.
--
-- KEYS[1]  job key prefix: the job hash of ID x is KEYS[1]..x
-- ARGV[1]  the most log lines a job keeps (records._notes.MAX_NOTE_LINES)
-- then per write, in order: job id, fencing token, progress ('' when
-- unchanged, else the fraction as text), message, n (how many lines), then
-- its n lines, oldest first.
--
-- The notes are fields of the job hash, so they are kept, and removed, with
-- it: np the progress fraction, nm its message, na the attempt and nt the
-- time (store clock) that wrote it; nl the log lines, a JSON array of
-- [attempt, time, text], oldest first, at most ARGV[1] (the newest); nd how
-- many older lines were pushed out. Older versions ignore these fields.
--
-- A write is applied only for a record leased with its token whose lease
-- has not expired (judge_lease's verdict 1); any other record (another
-- state, token or lease, expired, gone, damaged, of a newer format) is not
-- touched. Nothing before a record's writes can fail (an unreadable nl is
-- read as no lines, an unreadable nd as 0).
--
-- Returns {lines pushed out over the batch, code_1, code_2, ...}: code 1
-- written, 0 refused (the lease is not held: nothing changed).
--@include clock
--@include judge_lease
--@include probe_job
local now, now_s = clock()
local max_lines = tonumber(ARGV[1])
local out = {0}
local i = 2
while i <= #ARGV do
  local id, token, fraction, message = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n = tonumber(ARGV[i + 4])
  local first = i + 5
  i = first + n
  local key = KEYS[1] .. id
  local f = redis.pcall('HMGET', key, 'v', 'state', 'lease_token', 'lease_expires_at',
    'attempts', 'nl', 'nd')
  if not f[2] then f = probe_job(key, f, 7) end
  local code = 0
  if judge_lease(f, token, now) == 1 then
    local attempt = tonumber(f[5]) or 0
    if fraction ~= '' then
      redis.call('HSET', key, 'np', fraction, 'nm', message, 'na', attempt, 'nt', now_s)
    end
    if n > 0 then
      local lines = {}
      if f[6] then
        local ok, old = pcall(cjson.decode, f[6])
        if ok and type(old) == 'table' then lines = old end
      end
      for k = first, first + n - 1 do lines[#lines + 1] = {attempt, now_s, ARGV[k]} end
      local over = #lines - max_lines
      if over > 0 then
        local kept = {}
        for k = over + 1, #lines do kept[#kept + 1] = lines[k] end
        lines = kept
        redis.call('HSET', key, 'nd', (tonumber(f[7]) or 0) + over)
        out[1] = out[1] + over
      end
      redis.call('HSET', key, 'nl', cjson.encode(lines))
    end
    code = 1
  end
  out[#out + 1] = code
end
return out
