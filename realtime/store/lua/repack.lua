-- Replace command outcomes by their compressed form (a compaction, in batches), each only while
-- it is stored: an outcome is never rewritten, so the one read is the one replaced, and a hash
-- that expired meanwhile is not written again (it would have no TTL).
-- Atomic: one script on the session's slot.
-- KEYS: 1 command outcomes
-- ARGV: pairs (commandId, compressed outcome)
-- Returns the number replaced
local replaced = 0
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    replaced = replaced + 1
  end
end
return replaced
