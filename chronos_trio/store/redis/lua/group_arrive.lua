-- group_arrive.lua: record one member's result in a workflow group's hash
-- (its own slot: {ns:wf:<group>}:g); a second arrival of a member changes
-- nothing.
--
-- KEYS[1]  the group's hash: field = member index, value = '=' .. result,
--          or '-' for a member that kept no result
-- ARGV[1]  member index, ARGV[2] group size, ARGV[3] '=' .. result or '-',
-- ARGV[4]  ttl in ms (set again by every arrival: a member re-run late
--          keeps the others' results for another ttl)
--
-- Returns {} while members are missing, else every member's value in
-- member order (from the arrival that completes it on).
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local size = tonumber(ARGV[2])
if redis.call('HLEN', KEYS[1]) < size then return {} end
local names = {}
for k = 0, size - 1 do names[k + 1] = tostring(k) end
return redis.call('HMGET', KEYS[1], unpack(names))
