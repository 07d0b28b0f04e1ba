--@include format
-- Writes the record of the job at ARGV offset i (see enqueue.lua's header)
-- under key key: due at run_at_s (as stored), in state state, created at
-- created_s. Field order is the record's as every version wrote it: the
-- fields, then h when the job has headers.
local function write_record(key, i, run_at_s, state, created_s)
  local argv = ARGV  -- a local: reaching a global costs more
  redis.call('HSET', key, 'kind', argv[i + 1], 'payload', argv[i + 2], 'run_at', run_at_s,
    'state', state, 'attempts', '0', 'max_retries', argv[i + 5], 'timeout', argv[i + 6],
    'created_at', created_s, 'v', FORMAT_S)
  local h = argv[i + 7]
  if h ~= '' then redis.call('HSET', key, 'h', h) end
end
