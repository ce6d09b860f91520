-- An operator's redelivery of a session's events from a seq (profile §21): `next` goes back to
-- it and what was noted of those events is forgotten, so each is sent again (same webhook-id).
-- Atomic: one script on the session's slot; no attempt can interleave with the reset.
-- KEYS: 1 the session's events, 2 their delivery state
-- ARGV: 1 the first seq to send again
-- Returns how many kept events will be sent again (0: none is kept from that seq on)
local from = tonumber(ARGV[1])
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local again = 0
for _, seq in ipairs(redis.call('HKEYS', KEYS[1])) do
  if tonumber(seq) >= from then again = again + 1 end
end
for _, field in ipairs(redis.call('HKEYS', KEYS[2])) do
  if field ~= 'next' and tonumber(field) >= from then redis.call('HDEL', KEYS[2], field) end
end
redis.call('HSET', KEYS[2], 'next', ARGV[1])
redis.call('PEXPIRE', KEYS[2], math.max(redis.call('PTTL', KEYS[1]), 1))
return again
