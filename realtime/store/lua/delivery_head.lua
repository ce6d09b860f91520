-- The next session event to send (profile §21) and how it fared so far, at one instant. A seq
-- that was never kept (past the bound when it happened) is skipped: `next` moves on to the
-- lowest kept seq after it, so the receiver sees the gap and the later events still go.
-- Atomic: one script on the session's slot reads both hashes, and moves `next`, in one instant.
-- KEYS: 1 the session's events (seq → body), 2 their delivery state (seq → state, `next`,
--       `gen`: bumped by each redelivery, `since`: when the last redelivery was asked, ms)
-- Returns {next seq, body | false, state | false, the events' TTL in ms, gen, since | false,
--          how many events just before it were dropped (the backlog's bound) | false}
local seq = redis.call('HGET', KEYS[2], 'next') or '1'
local body = redis.call('HGET', KEYS[1], seq)
if not body then
  local later = nil
  for _, kept in ipairs(redis.call('HKEYS', KEYS[1])) do
    local n = tonumber(kept)
    if n > tonumber(seq) and (later == nil or n < later) then later = n end
  end
  if later ~= nil then
    seq = tostring(later)
    body = redis.call('HGET', KEYS[1], seq)
    redis.call('HSET', KEYS[2], 'next', seq)
    redis.call('PEXPIRE', KEYS[2], math.max(redis.call('PTTL', KEYS[1]), 1))
  end
end
return {
  tonumber(seq),
  body,
  redis.call('HGET', KEYS[2], seq),
  redis.call('PTTL', KEYS[1]),
  tonumber(redis.call('HGET', KEYS[2], 'gen') or '0'),
  redis.call('HGET', KEYS[2], 'since'),
  redis.call('HGET', KEYS[2], 'd' .. seq),
}
