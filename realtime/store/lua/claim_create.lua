-- Claim a session.create, once per messageId and per clientSessionId, within the limit of live
-- sessions per principal.
-- Atomic: one script on the owner's slot (every key carries {o:<owner>}); the checks and the
-- writes run without interleaving, so concurrent creates cannot both pass the limit or a claim.
-- KEYS: 1 the messageId's claim, 2 the clientSessionId's claim, 3 the owner's live sessions,
--       4 the owner's task index
-- ARGV: 1 taskId, 2 sessionId, 3 payload digest, 4 claim ttl seconds, 5 score (ms), 6 limit
-- Returns {'message', taskId} | {'client', 'taskId digest'} | {'limit'} | {'ok'}
local by_message = redis.call('GET', KEYS[1])
if by_message then return {'message', by_message} end
local by_client = redis.call('GET', KEYS[2])
if by_client then return {'client', by_client} end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then return {'limit'} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[3], 'EX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[4])
redis.call('EXPIRE', KEYS[4], ARGV[4])
return {'ok'}
