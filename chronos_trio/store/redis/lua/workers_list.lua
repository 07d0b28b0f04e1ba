-- workers_list.lua: the unlapsed entries of the worker registry, judged by Redis TIME.
--
-- KEYS[1]  registry hash: worker id -> the entry's JSON (records._workers)
-- KEYS[2]  registry zset: worker id -> when its entry lapses (epoch seconds)
--
-- Read-only. An id in the zset whose hash field is gone comes back with ''
-- (the reader skips it, with a warning).
--
-- Returns {now, id, lapses_at, json, id, lapses_at, json, ...}; times as text.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local live = redis.call('ZRANGEBYSCORE', KEYS[2], string.format('(%.17g', now), '+inf',
  'WITHSCORES')
local out = {string.format('%.17g', now)}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = live[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[1], live[i]) or ''
end
return out
