-- What a tenant used of its allowances now (profile §24), read in one instant by Redis time.
-- Atomic: one script on the tenant's slot (every key carries {t:<tenant>}); it writes nothing.
-- KEYS: 1 the tenant's live sessions, 2 what its ended sessions used, 3 the sum of its live
--       sessions' admission times
-- Returns {now, ms used today by ended sessions, this month, ms run by the live ones, how many
--          are live}
--! include tenant_used
local now = now_ms()
local dms, mms, running, count = used(KEYS[1], KEYS[3], KEYS[2], now)
return {now, dms, mms, running, count}
