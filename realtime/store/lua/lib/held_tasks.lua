-- An owner's task index, pruned of the tasks that expired (included by the scripts that add to
-- it or read it, so each prunes and counts in its own atomic step).
-- The index is three keys on the owner's slot: the ids by status time (ms), their `[state,
-- contextId]`, and the REJECTED ids by when they expire (ms).

local function drop_tasks(index, info, rejected, ids)
  -- in chunks: unpack() of a long list would overflow Lua's C stack
  for first = 1, #ids, 500 do
    local chunk = {unpack(ids, first, math.min(first + 499, #ids))}
    redis.call('ZREM', index, unpack(chunk))
    redis.call('HDEL', info, unpack(chunk))
    redis.call('ZREM', rejected, unpack(chunk))
  end
end

-- How many tasks the owner holds once those that expired by `now_ms` are gone: a REJECTED task
-- at its own expiry, any task whose last status is `ttl_ms` old.
local function held_tasks(index, info, rejected, now_ms, ttl_ms)
  local cutoff = string.format('%d', tonumber(now_ms) - tonumber(ttl_ms))
  drop_tasks(index, info, rejected, redis.call('ZRANGEBYSCORE', rejected, '-inf', now_ms))
  drop_tasks(index, info, rejected, redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. cutoff))
  return redis.call('ZCARD', index)
end

-- When a held task expires first (ms): the earliest REJECTED expiry or the oldest status plus
-- the task lifetime (`ttl_ms`); what a caller refused at the limit is told to wait for.
local function first_expiry(index, rejected, ttl_ms)
  local soonest = false
  local r = redis.call('ZRANGE', rejected, 0, 0, 'WITHSCORES')
  if r[2] then soonest = tonumber(r[2]) end
  local t = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
  if t[2] then
    local expires = tonumber(t[2]) + tonumber(ttl_ms)
    if not soonest or expires < soonest then soonest = expires end
  end
  return soonest and string.format('%d', soonest) or ''
end
