-- schedule_edit.lua: one edit of a stored schedule of leadership NAME
-- (ScheduleStoreRole.edit_schedule), stamped with Redis TIME.
--
-- KEYS[1]  hash of NAME's stored schedules: id -> '<paused 0|1>|<updated_at>|<definition>'
-- KEYS[2]  NAME's schedules version: a counter, one more per applied edit
-- ARGV[1]  the edit: 'add', 'change', 'pause', 'resume' or 'remove'
-- ARGV[2]  schedule id
-- ARGV[3]  definition ('add' and 'change'; '' for the others)
--
-- A stored value whose flag is unreadable counts as not paused (a change
-- keeps the flag it reads). Keys of the wrong type fail the script before
-- anything is written.
--
-- Returns the new version, or 0 (nothing changed) when refused: 'add' of
-- a stored id, any other edit of an id that is not stored.
--@include clock
--@include wrong_type
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'string')
if bad then return redis.error_reply(bad) end
local edit, id = ARGV[1], ARGV[2]
local cur = redis.call('HGET', KEYS[1], id)
if (cur == false) ~= (edit == 'add') then return 0 end
local _, now = clock()
if edit == 'remove' then
  redis.call('HDEL', KEYS[1], id)
else
  local definition = ARGV[3]
  local paused = '0'
  if edit == 'pause' then
    paused = '1'
  elseif edit == 'change' and string.sub(cur, 1, 2) == '1|' then
    paused = '1'
  end
  if edit == 'pause' or edit == 'resume' then
    local at = string.find(cur, '|', 3, true)
    definition = at and string.sub(cur, at + 1) or ''
  end
  redis.call('HSET', KEYS[1], id, paused .. '|' .. now .. '|' .. definition)
end
return redis.call('INCR', KEYS[2])
