-- Compact an ended session (profile §20): its snapshot becomes its final summary and its task
-- is stored compressed (both keep their TTLs); its armed timers go. Only at the version the
-- summary was made from, and only once its outbox is empty (a LiveKit call still to carry out
-- needs the whole snapshot).
-- Atomic: one script on the session's slot (every key carries {<sessionId>}).
-- KEYS: 1 session hash, 2 task record, 3 outbox, 4 the session's armed timers,
--       5 their causes
-- ARGV: 1 expected version, 2 summary, 3 task record
-- Returns {'ok', armed timer...} | {'moved'} | {'busy'}
if (redis.call('HGET', KEYS[1], 'v') or '0') ~= ARGV[1] then return {'moved'} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'busy'} end
redis.call('HSET', KEYS[1], 's', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL')
local armed = redis.call('HKEYS', KEYS[4])
redis.call('DEL', KEYS[4], KEYS[5])
return {'ok', unpack(armed)}
