-- Claim a session.create, once per messageId and per clientSessionId, within the limits of
-- live sessions and of held tasks per principal.
-- Atomic: one script on the owner's slot (every key carries {o:<owner>}); the checks and the
-- writes run without interleaving, so concurrent creates cannot both pass a limit or a claim.
-- KEYS: 1 the messageId's claim, 2 the clientSessionId's claim, 3 the owner's live sessions,
--       4 the owner's task index, 5 its info, 6 its REJECTED expiries
-- ARGV: 1 taskId, 2 sessionId, 3 payload digest, 4 claim ttl seconds, 5 score (ms),
--       6 live sessions limit, 7 now (ms), 8 task lifetime (ms), 9 held tasks limit
-- Returns {'message', taskId} | {'client', 'taskId digest'} | {'limit'}
--       | {'tasks', first expiry ms or ''} | {'ok'}
-- The task's info in the index is written by the session's commits (its state changes).
--! include held_tasks
local by_message = redis.call('GET', KEYS[1])
if by_message then return {'message', by_message} end
local by_client = redis.call('GET', KEYS[2])
if by_client then return {'client', by_client} end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then return {'limit'} end
if held_tasks(KEYS[4], KEYS[5], KEYS[6], ARGV[7], ARGV[8]) >= tonumber(ARGV[9]) then
  return {'tasks', first_expiry(KEYS[4], KEYS[6], ARGV[8])}
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[3], 'EX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[4])
for i = 4, 6 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
return {'ok'}
