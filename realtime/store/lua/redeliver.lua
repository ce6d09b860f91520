-- An operator's redelivery of a session's events from a seq (profile §21): `next` goes back to
-- it (never forward: events before it still waiting stay first), what was noted of the events
-- from it on is forgotten, and `gen` moves so that an attempt under way cannot absorb it; each
-- is sent again with its webhook-id, retried for the whole bound from now (`since`).
-- Atomic: one script on the session's slot; no attempt can interleave with the reset.
-- KEYS: 1 the session's events, 2 their delivery state
-- ARGV: 1 the first seq to send again, 2 now (ms)
-- Returns how many kept events will be sent (0: none is kept from that seq on; nothing changed)
local from = tonumber(ARGV[1])
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local first = math.min(tonumber(redis.call('HGET', KEYS[2], 'next') or '1'), from)
local again = 0
for _, seq in ipairs(redis.call('HKEYS', KEYS[1])) do
  if tonumber(seq) >= first then again = again + 1 end
end
for _, field in ipairs(redis.call('HKEYS', KEYS[2])) do
  local seq = tonumber(field)
  if seq and seq >= from then redis.call('HDEL', KEYS[2], field) end
end
redis.call('HSET', KEYS[2], 'next', tostring(first), 'since', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'gen', 1)
redis.call('PEXPIRE', KEYS[2], math.max(redis.call('PTTL', KEYS[1]), 1))
return again
