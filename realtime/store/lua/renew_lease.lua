-- Extend a lease only if we still hold it (a runner's per-session lease, a duty's lease).
-- Atomic: the check of the holder's token and the PEXPIRE are one script on the lease's slot,
-- so a lease that ran out and was taken by another holder is never extended by us.
-- KEYS: 1 the lease
-- ARGV: 1 our token, 2 ttl ms
-- Returns 1 (renewed) | 0 (not ours)
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
