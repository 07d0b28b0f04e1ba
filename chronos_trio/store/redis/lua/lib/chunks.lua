--@include chunk_sizes
-- Format 2 may store a payload (enqueue.lua: a delayed job's, of more than
-- CHUNK bytes and at most CHUNKED_MAX) in chunks: its first CHUNK bytes in
-- payload, the rest CHUNK bytes a field in p1 .. p<n>, and n in pn (see
-- RECORD_FORMAT in _codec.py), so every value fits Redis's compact listpack
-- encoding of small hashes.
local MAX_CHUNKS = CHUNKED_MAX / CHUNK - 1
