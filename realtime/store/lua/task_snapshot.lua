-- A task and the bounds of its session's event stream, read at one instant: a subscriber that
-- sends this task and then follows the stream after `newest` misses nothing. A compacted
-- session's stream is (partly) in its archive: the archive's bounds, and its newest entry
-- unless the stream has newer ones.
-- Atomic: one script on the session's slot (the keys carry {<sessionId>}); no commit can land
-- between the reads.
-- KEYS: 1 task record, 2 event stream, 3 archive
-- Returns {task | false, newest id | false, oldest id | false, oldest entry's event | false}
local task = redis.call('GET', KEYS[1])
local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
local archived = redis.call('HMGET', KEYS[3], 'newest', 'oldest', 'first')
if archived[1] then
  return {task, newest and newest[1] or archived[1], archived[2], archived[3]}
end
local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
if not oldest then return {task, false, false, false} end
return {task, newest[1], oldest[1], oldest[2][2]}
