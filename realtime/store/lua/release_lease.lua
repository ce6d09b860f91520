-- Release a lease only if we still hold it (a lease that expired may belong to another holder).
-- Atomic: the check of the holder's token and the DEL are one script on the lease's slot, so
-- another holder's lease taken in between is never deleted.
-- KEYS: 1 the lease
-- ARGV: 1 our token
-- Returns 1 (released) | 0 (not ours)
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
