-- A task and the bounds of its session's event stream, read at one instant: a subscriber that
-- sends this task and then follows the stream after `newest` misses nothing.
-- Atomic: one script on the session's slot (both keys carry {<sessionId>}); no commit can land
-- between the reads.
-- KEYS: 1 task record, 2 event stream
-- Returns {task | false, newest id | false, oldest id | false, oldest entry's event | false}
local task = redis.call('GET', KEYS[1])
local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
if not oldest then return {task, false, false, false} end
return {task, newest[1], oldest[1], oldest[2][2]}
