-- Claim a message id for a task and index the task, once (SendMessage without a session).
-- Atomic: one script on the owner's slot (both keys carry {o:<owner>}); Redis runs it without
-- interleaving another command, so two sends of one messageId cannot both claim it.
-- KEYS: 1 the message id's claim, 2 the owner's task index
-- ARGV: 1 taskId, 2 claim ttl seconds, 3 index score (status time, ms)
-- Returns the earlier taskId | false (claimed now)
local existing = redis.call('GET', KEYS[1])
if existing then return existing end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return false
