-- One commit of a session (profile §11): replay check, version check, then snapshot, task,
-- outcome, events, session events and outbox with their TTLs (profile §20: the snapshot, the
-- task and the outbox the task TTL; the outcomes, the event stream and the timeline the replay
-- window; the session events their own).
-- Atomic: one script on the session's slot (every key carries {<sessionId>}, so it runs
-- unchanged on Redis Cluster); Redis runs it without interleaving, and it returns before any
-- write unless both checks pass, so no partial commit is ever visible.
-- KEYS: 1 session hash, 2 task record, 3 command outcomes, 4 event stream, 5 outbox,
--       6 timeline, 7 session events for the app's backend, 8 their delivery state
-- ARGV: 1 expected version, 2 snapshot, 3 task record, 4 commandId ('' = none),
--       5 outcome, 6 ttl seconds, 7 events maxlen, 8 replay window seconds, 9 event count,
--       10 session event count, 11 session events kept at most, 12 their ttl seconds,
--       then the events, then pairs (seq, body) of session events, then pairs
--       (effectId, effect) for the outbox
-- Returns {'replay', outcome} | {'conflict', current version, snapshot | false, task | false}
--         | {'ok', new version, session events not kept (over the bound)}
if ARGV[4] ~= '' then
  local prior = redis.call('HGET', KEYS[3], ARGV[4])
  if prior then return {'replay', prior} end
end
local current = redis.call('HGET', KEYS[1], 'v') or '0'
if current ~= ARGV[1] then
  -- what the caller needs to decide again, read in the same instant
  local snapshot = redis.call('HGET', KEYS[1], 's')
  return {'conflict', current, snapshot, redis.call('GET', KEYS[2])}
end
local version = tostring(tonumber(current) + 1)
local ttl = tonumber(ARGV[6])
redis.call('HSET', KEYS[1], 'v', version, 's', ARGV[2])
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[3], 'EX', ttl)
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
end
local events = tonumber(ARGV[9])
for i = 1, events do
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'e', ARGV[12 + i])
end
-- every commit sets the window from now (an EXPIRE of a missing key does nothing): the live
-- session's, or, from the commit that ended it, the replay window alone
local window = ARGV[8]
redis.call('EXPIRE', KEYS[3], window)
redis.call('EXPIRE', KEYS[4], window)
redis.call('EXPIRE', KEYS[6], window)
local first = 13 + events
local notices = tonumber(ARGV[10])
local dropped = 0
if notices > 0 then
  local cap = tonumber(ARGV[11])
  if redis.call('HLEN', KEYS[7]) + notices > cap then
    -- full: the events already sent (below `next`) make room first, so the bound is on the
    -- backlog; past it nothing more is kept and the receiver sees the seq stop
    local sent = tonumber(redis.call('HGET', KEYS[8], 'next') or '1')
    for _, seq in ipairs(redis.call('HKEYS', KEYS[7])) do
      if tonumber(seq) < sent then
        redis.call('HDEL', KEYS[7], seq)
        redis.call('HDEL', KEYS[8], seq)
      end
    end
  end
  local room = cap - redis.call('HLEN', KEYS[7])
  for i = first, first + 2 * notices - 1, 2 do
    if room > 0 then
      redis.call('HSET', KEYS[7], ARGV[i], ARGV[i + 1])
      room = room - 1
    else
      dropped = dropped + 1
    end
  end
  redis.call('EXPIRE', KEYS[7], ARGV[12])
end
first = first + 2 * notices
if #ARGV >= first then
  for i = first, #ARGV, 2 do
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', KEYS[5], ttl)
end
return {'ok', version, dropped}
