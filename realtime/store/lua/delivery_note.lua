-- How one attempt to send a session event fared; with ARGV[3] = '1' the session moves on to
-- the next seq. Only while that event is still the next one: a redelivery an operator asked for
-- meanwhile (which moved `next` back) is not undone by an attempt that was under way.
-- Atomic: one script on the session's slot checks `next` and writes in the same instant.
-- KEYS: 1 the delivery state hash
-- ARGV: 1 seq, 2 state, 3 '1' to move on, 4 TTL in ms
-- Returns 1 when noted, 0 when `next` had moved
local seq = ARGV[1]
if (redis.call('HGET', KEYS[1], 'next') or '1') ~= seq then return 0 end
redis.call('HSET', KEYS[1], seq, ARGV[2])
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'next', tostring(tonumber(seq) + 1))
end
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 1
