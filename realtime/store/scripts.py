"""The Lua scripts of the store, registered once by `RedisStore` (the commit itself is
`commit.lua`). Each is one atomic step on one slot; the comment above each says what it returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

# claim a message id for a task and index the task, once; returns the earlier task id if any
CLAIM_MESSAGE: Final = """
local existing = redis.call('GET', KEYS[1])
if existing then return existing end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return false
"""

# claim a create for a session, once per messageId and per clientSessionId, within the limit of
# live sessions; returns {'message', taskId} | {'client', 'taskId digest'} | {'limit'} | {'ok'}
CLAIM_CREATE: Final = """
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
"""

# release a lease only if we still hold it (a lease that expired may belong to another runner)
RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# store the outcome of a command that applied without changing the session (e.g. registering a
# device again with the same capabilities), at the version it was decided on; nothing else changes
# KEYS: 1 session hash, 2 command outcomes; ARGV: 1 commandId, 2 expected version, 3 outcome, 4 ttl
# Returns {'replay', outcome} | {'conflict', current version} | {'ok', version}
REMEMBER: Final = """
local prior = redis.call('HGET', KEYS[2], ARGV[1])
if prior then return {'replay', prior} end
local current = redis.call('HGET', KEYS[1], 'v') or '0'
if current ~= ARGV[2] then return {'conflict', current} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {'ok', current}
"""

# claim due timers atomically: each returned member's score moves past a lease, so another worker
# does not take it until the lease runs out (a crashed worker's timers come back then)
CLAIM_TIMERS: Final = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], member) end
return due
"""

# extend a lease only if we still hold it
RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

COMMIT: Final = (Path(__file__).parent / "commit.lua").read_text()

# a task and the bounds of its session's event stream, read at one instant (one slot): a
# subscriber that sends this task and then follows the stream after `newest` misses nothing
# KEYS: 1 task record, 2 event stream
# Returns {task | false, newest id | false, oldest id | false, oldest entry's event | false}
SNAPSHOT: Final = """
local task = redis.call('GET', KEYS[1])
local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
if not oldest then return {task, false, false, false} end
return {task, newest[1], oldest[1], oldest[2][2]}
"""
