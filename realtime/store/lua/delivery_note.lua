-- How one attempt to send a session event fared; with ARGV[3] = '1' the session moves on to
-- the next seq. Only while that event is still the next one and no redelivery was asked since
-- the attempt began (`gen` unchanged): an attempt under way never undoes or absorbs one.
-- Atomic: one script on the session's slot checks `next` and `gen` and writes in one instant.
-- KEYS: 1 the delivery state hash
-- ARGV: 1 seq, 2 state, 3 '1' to move on, 4 TTL in ms, 5 the gen the attempt began at
-- Returns 1 when noted, 0 when the session had moved (nothing written)
local seq = ARGV[1]
if (redis.call('HGET', KEYS[1], 'next') or '1') ~= seq then return 0 end
if (redis.call('HGET', KEYS[1], 'gen') or '0') ~= ARGV[5] then return 0 end
redis.call('HSET', KEYS[1], seq, ARGV[2])
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'next', tostring(tonumber(seq) + 1))
end
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 1
