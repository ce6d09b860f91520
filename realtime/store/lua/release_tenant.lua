-- Release a session's place among its tenant's live sessions, and count its usage once
-- (profile §24): the usage goes into the tenant's day (HSETNX: a repeated release, by the
-- compaction or the reconciler, writes nothing), and only a first write adds its session time
-- to what the tenant used that day and month. The day is the one the session's end was
-- committed in by Redis time (the commit stored it), so every release of it names the same.
-- Atomic: one script on the tenant's slot (every key carries {t:<tenant>}).
-- KEYS: 1 the tenant's live sessions, 2 what its ended sessions used, 3 the usage of the day,
--       4 the sum of its live sessions' admission times
-- ARGV: 1 sessionId, 2 its usage (JSON; '' when the session is gone: only its place goes, and
--       only once it was admitted at least ARGV[7] ms ago, so a create under way keeps it),
--       3 its session time (ms), 4 the day it ended (days since the epoch), 5 its month
--       (yyyymm), 6 the usage's ttl (s), 7 that grace (ms)
-- Returns {1 when the session left the live sessions now, 1 when its usage was counted now}
--! include tenant_used
if ARGV[2] == '' then
  local admitted = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if not admitted then return {0, 0} end
  if now_ms() - tonumber(admitted) < tonumber(ARGV[7]) then return {0, 0} end
  return {leave(KEYS[1], KEYS[4], ARGV[1]), 0}
end
local left = leave(KEYS[1], KEYS[4], ARGV[1])
if redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2]) == 0 then return {left, 0} end
redis.call('EXPIRE', KEYS[3], ARGV[6])
local function add(which, total, at, ms)
  local stored = tonumber(redis.call('HGET', KEYS[2], which) or '-1')
  if at == stored then
    redis.call('HINCRBY', KEYS[2], total, ms)
  elseif at > stored then
    redis.call('HSET', KEYS[2], which, at, total, ms)
  end -- an end of an earlier day or month than the one counted: it counts in neither
end
add('day', 'dms', tonumber(ARGV[4]), ARGV[3])
add('month', 'mms', tonumber(ARGV[5]), ARGV[3])
redis.call('EXPIRE', KEYS[2], 5356800) -- 62 days: a month's count outlives the month
return {left, 1}
