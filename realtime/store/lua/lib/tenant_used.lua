-- A tenant's session time in the current UTC day and month by Redis time (included by the
-- scripts that admit a session or read the allowances, so each measures in its own atomic
-- step). Keys on the tenant's slot: its live sessions (id → admitted ms), the sum of their
-- admission times (kept beside them by every script that adds or removes one, so the time they
-- have run is read in O(1) whatever their number), and what its ended sessions used (`day`,
-- days since the epoch, and `dms`; `month`, yyyymm, and `mms`).

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- yyyymm of the day `days` after 1970-01-01 (H. Hinnant's civil_from_days)
local function month_of(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor(
    (doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return y * 100 + m
end

-- The ms the tenant's ended sessions used today and this month, and the ms its live sessions
-- have run so far (a live session counts in full in the day and month it runs in: it will
-- count in the day it ends). The sum is exact in Redis; read here as a double, it is off by a
-- few ms at most beyond 2^53, nothing next to an allowance of minutes.
local function used(live, since, used_key, now)
  local day = math.floor(now / 86400000)
  local stored = redis.call('HMGET', used_key, 'day', 'dms', 'month', 'mms')
  local dms = tonumber(stored[1]) == day and tonumber(stored[2]) or 0
  local mms = tonumber(stored[3]) == month_of(day) and tonumber(stored[4]) or 0
  local count = redis.call('ZCARD', live)
  local running = 0
  if count > 0 then
    running = math.max(0, count * now - tonumber(redis.call('GET', since) or '0'))
  end
  return dms, mms, running, count
end

-- `id` leaves the live sessions (and its admission time their sum): 1 if it was there
local function leave(live, since, id)
  local admitted = redis.call('ZSCORE', live, id)
  if not admitted then return 0 end
  redis.call('ZREM', live, id)
  redis.call('DECRBY', since, admitted)
  return 1
end
