-- Store the outcome of a command that applied without changing the session (e.g. registering a
-- device again with the same capabilities), at the version it was decided on; nothing else
-- changes.
-- Atomic: one script on the session's slot (both keys carry {<sessionId>}); the replay check,
-- the version check and the write run without interleaving, like the commit.
-- KEYS: 1 session hash, 2 command outcomes
-- ARGV: 1 commandId, 2 expected version, 3 outcome, 4 replay window seconds
-- Returns {'replay', outcome} | {'conflict', current version} | {'ok', version}
local prior = redis.call('HGET', KEYS[2], ARGV[1])
if prior then return {'replay', prior} end
local current = redis.call('HGET', KEYS[1], 'v') or '0'
if current ~= ARGV[2] then return {'conflict', current} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'ok', current}
