-- delete.lua: delete one job that is not leased.
--
-- KEYS[1]  scheduled zset, KEYS[2] ready zset, KEYS[3] leased zset,
-- KEYS[4]  retry_wait zset, KEYS[5] succeeded zset, KEYS[6] dead zset
-- KEYS[7]  job key prefix: the job hash of ID x is KEYS[7]..x
-- ARGV[1]  job id
--
-- The record is judged before anything is written (see README.md). One
-- whose state is missing or unknown is deleted and taken out of every index
-- (where it was indexed is unknown): deleting is how an operator clears a
-- damaged record. One of a newer format is left untouched; a key that is not
-- a job hash is not a job and is left alone.
--
-- A workflow job keeps its place in its flow (see lib/keep_flow_place.lua).
--
-- Returns {code, set aside (see README.md)}: code 1 deleted, 0 absent,
-- -1 leased (left alone), 3 left alone (newer format).
--@include keep_flow_place
--@include new_aside
--@include notify_done
--@include read_one
--@include unique_finished
local aside = new_aside()
local key = KEYS[7] .. ARGV[1]
-- (an unreadable format does not matter: the record goes)
local f, _, code = read_one(aside, key, ARGV[1])
if not f then return {code, aside} end
local state = f[2]
if state == 'leased' then return {-1, aside} end
local zsets = {scheduled = KEYS[1], ready = KEYS[2], retry_wait = KEYS[4],
  succeeded = KEYS[5], dead = KEYS[6], aborted = KEYS[6]}
local z = state and zsets[state]
if z then
  redis.call('ZREM', z, ARGV[1])
else
  for k = 1, 6 do redis.call('ZREM', KEYS[k], ARGV[1]) end
end
local u = redis.call('HMGET', key, 'w', 'x')
unique_finished(KEYS[7], ARGV[1], u[2], false)  -- its unique key is free
local w = u[1]
if not keep_flow_place(KEYS[7], ARGV[1], key, state, u[2]) then
  redis.call('DEL', key)
end
notify_done(key, w)
return {1, aside}
