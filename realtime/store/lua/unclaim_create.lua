-- Take back a create's claim (`claim_create.lua`) when its tenant refused to admit the session
-- (profile §24): a refused create stores nothing, so the same messageId or clientSessionId
-- creates the session once the tenant is under its limits again.
-- Atomic: one script on the owner's slot (every key carries {o:<owner>}); each claim goes only
-- while it still names this task.
-- KEYS: 1 the messageId's claim, 2 the clientSessionId's claim, 3 the owner's live sessions,
--       4 the owner's task index, 5 its info
-- ARGV: 1 taskId, 2 sessionId
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
local by_client = redis.call('GET', KEYS[2])
if by_client and string.sub(by_client, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  redis.call('DEL', KEYS[2])
end
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
