-- Claim due timers: each returned member's score moves past a lease, so another worker does
-- not take it until the lease runs out (a crashed worker's timers come back then).
-- Atomic: the range read and the score moves are one script on the index's slot, so two
-- workers never claim the same timer.
-- KEYS: 1 the due timers (sorted set)
-- ARGV: 1 now ms, 2 the lease's end ms, 3 at most this many
-- Returns the claimed members
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], member) end
return due
