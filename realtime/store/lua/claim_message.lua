-- Claim a message id for a REJECTED task and index the task, once, within the limit of tasks
-- the owner holds (SendMessage without a session).
-- Atomic: one script on the owner's slot (every key carries {o:<owner>}); Redis runs it without
-- interleaving another command, so two sends of one messageId cannot both claim it, and
-- concurrent sends cannot both pass the limit.
-- KEYS: 1 the message id's claim, 2 the owner's task index, 3 its info, 4 its REJECTED expiries
-- ARGV: 1 taskId, 2 claim ttl seconds, 3 index score (status time, ms), 4 now (ms),
--       5 task lifetime (ms), 6 limit of held tasks, 7 the task's expiry (ms), 8 its info,
--       9 index ttl seconds
-- Returns {'earlier', taskId} | {'limit', first expiry ms or ''} | {'claimed'}
--! include held_tasks
local existing = redis.call('GET', KEYS[1])
if existing then return {'earlier', existing} end
if held_tasks(KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[5]) >= tonumber(ARGV[6]) then
  return {'limit', first_expiry(KEYS[2], KEYS[4], ARGV[5])}
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[8])
redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
for i = 2, 4 do redis.call('EXPIRE', KEYS[i], ARGV[9]) end
return {'claimed'}
