-- The next session event to send (profile §21) and how it fared so far, at one instant.
-- Atomic: one script on the session's slot reads both hashes at one instant.
-- KEYS: 1 the session's events (seq → body), 2 their delivery state (seq → state, `next`)
-- Returns {next seq, body | false, state | false, the events' TTL in ms}
local seq = redis.call('HGET', KEYS[2], 'next') or '1'
return {
  tonumber(seq),
  redis.call('HGET', KEYS[1], seq),
  redis.call('HGET', KEYS[2], seq),
  redis.call('PTTL', KEYS[1]),
}
