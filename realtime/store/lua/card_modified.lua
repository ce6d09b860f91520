-- When the Agent Card's content last changed: the time stored with this card's ETag, or now,
-- stored with it, when the record holds another card's (or none).
-- Atomic: the comparison and the write are one script on the record's slot, so processes that
-- start with the same new card at once all answer the time the first of them stored.
-- KEYS: 1 the record (hash: etag, modified)
-- ARGV: 1 this card's ETag, 2 now (Unix seconds)
-- Returns the time (Unix seconds) this card's content has been served since
if redis.call('HGET', KEYS[1], 'etag') == ARGV[1] then
  local modified = tonumber(redis.call('HGET', KEYS[1], 'modified'))
  if modified then return modified end
end
redis.call('HSET', KEYS[1], 'etag', ARGV[1], 'modified', ARGV[2])
return tonumber(ARGV[2])
