-- Admit a session for its tenant (profile §24): within the allowances of the day and the month,
-- the live sessions and the starts of the last minute, all by Redis time.
-- Atomic: one script on the tenant's slot (every key carries {t:<tenant>}); the checks and the
-- writes run without interleaving, so replicas admitting at once never pass a limit together.
-- Admitting a session already admitted (a retried create) changes nothing.
-- KEYS: 1 the tenant's live sessions, 2 its starts, 3 what its ended sessions used, 4 the sum
--       of its live sessions' admission times
-- ARGV: 1 sessionId, 2 live sessions limit, 3 starts per minute, 4 day allowance (ms),
--       5 month allowance (ms) (each -1: none), 6 ttl of the live sessions (s)
-- Returns {'ok', now} | {'day' | 'month', used ms, allowance ms, now}
--       | {'live', count, limit, now} | {'rate', count, limit, ms until a start leaves}
--! include tenant_used
local now = now_ms()
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {'ok', now} end
local day_ms, month_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
if day_ms >= 0 or month_ms >= 0 then
  local dms, mms, running = used(KEYS[1], KEYS[4], KEYS[3], now)
  if day_ms >= 0 and dms + running >= day_ms then return {'day', dms + running, day_ms, now} end
  if month_ms >= 0 and mms + running >= month_ms then
    return {'month', mms + running, month_ms, now}
  end
end
local live_limit = tonumber(ARGV[2])
if live_limit >= 0 then
  local count = redis.call('ZCARD', KEYS[1])
  if count >= live_limit then return {'live', count, live_limit, now} end
end
local per_minute = tonumber(ARGV[3])
if per_minute >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
  local count = redis.call('ZCARD', KEYS[2])
  if count >= per_minute then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    local wait = oldest[2] and (tonumber(oldest[2]) + 60000 - now) or 60000
    return {'rate', count, per_minute, math.max(1, wait)}
  end
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[2], 60000)
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('INCRBY', KEYS[4], now)
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('EXPIRE', KEYS[4], ARGV[6]) -- the two expire together
return {'ok', now}
