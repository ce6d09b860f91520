-- Compact an ended session (profile §20): its snapshot becomes its final summary (the context
-- its agent saved for a successor goes), and its task
-- is stored compressed (both keep their TTLs), its event stream and timeline become one
-- archive of compressed entries with the TTL the streams had left, and its armed timers go
-- (its command outcomes are compressed after it, in batches: `repack.lua`). Only at the
-- version the summary was made from, with both streams as they were read, and only once its
-- outbox is empty (a LiveKit call still to carry out needs the whole snapshot).
-- Atomic: one script on the session's slot (every key carries {<sessionId>}).
-- KEYS: 1 session hash, 2 task record, 3 outbox, 4 the session's armed timers, 5 their causes,
--       6 event stream, 7 timeline stream, 8 archive
-- ARGV: 1 expected version, 2 summary, 3 task record, 4 the event stream's newest id as read,
--       5 the timeline's ('' = none), 6 the events archived, 7 the timeline archived,
--       8 the newest event id, 9 the oldest, 10 the oldest entry ('' for 6-10: no archive)
-- Returns {'ok', armed timer...} | {'moved'} | {'busy'}
if (redis.call('HGET', KEYS[1], 'v') or '0') ~= ARGV[1] then return {'moved'} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'busy'} end
local function newest(stream)
  local entry = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
  return entry and entry[1] or ''
end
if newest(KEYS[6]) ~= ARGV[4] or newest(KEYS[7]) ~= ARGV[5] then return {'moved'} end
redis.call('HSET', KEYS[1], 's', ARGV[2])
redis.call('HDEL', KEYS[1], 'x')  -- the agent's saved context served the live session only
redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL')
if ARGV[8] ~= '' then
  -- as long as the longer-lived stream had left (the commits set both alike)
  local ttl = math.max(redis.call('PTTL', KEYS[6]), redis.call('PTTL', KEYS[7]),
                       redis.call('PTTL', KEYS[8]))
  if ttl > 0 then  -- else they are gone (or, never so, kept without a TTL: left as they are)
    redis.call('HSET', KEYS[8], 'events', ARGV[6], 'timeline', ARGV[7], 'newest', ARGV[8],
               'oldest', ARGV[9], 'first', ARGV[10])
    redis.call('PEXPIRE', KEYS[8], ttl)
    redis.call('DEL', KEYS[6], KEYS[7])
  end
end
local armed = redis.call('HKEYS', KEYS[4])
redis.call('DEL', KEYS[4], KEYS[5])
return {'ok', unpack(armed)}
