-- One commit of a session (profile §11): replay check, version check, then snapshot, task,
-- outcome, events, session events and outbox with their TTLs (profile §20: the snapshot, the
-- task and the outbox the task TTL; the outcomes, the event stream and the timeline the replay
-- window; the session events their own).
-- Atomic: one script on the session's slot (every key carries {<sessionId>}, so it runs
-- unchanged on Redis Cluster); Redis runs it without interleaving, and it returns before any
-- write unless both checks pass, so no partial commit is ever visible.
-- KEYS: 1 session hash, 2 task record, 3 command outcomes, 4 event stream, 5 outbox,
--       6 timeline, 7 session events for the app's backend, 8 their delivery state
-- ARGV: 1 expected version, 2 snapshot, 3 task record, 4 commandId ('' = none),
--       5 outcome, 6 ttl seconds, 7 events maxlen, 8 replay window seconds, 9 event count,
--       10 session event count, 11 session events kept at most, 12 their ttl seconds,
--       13 the agent's saved context ('' = unchanged; profile §23), 14 '1' when this commit
--       ends the session, then the events, then triples (seq, body, '1' for an event always
--       kept) of session events, then pairs (effectId, effect) for the outbox
-- Returns {'replay', outcome} | {'conflict', current version, snapshot | false, task | false}
--         | {'ok', new version, session events dropped (over the bound), when it ended}
-- When it ended: for a commit that ends the session, the Redis time (ms) stored in the
-- session's hash (`e`), which decides the UTC day its usage counts in (profile §24); else ''.
if ARGV[4] ~= '' then
  local prior = redis.call('HGET', KEYS[3], ARGV[4])
  if prior then return {'replay', prior} end
end
local current = redis.call('HGET', KEYS[1], 'v') or '0'
if current ~= ARGV[1] then
  -- what the caller needs to decide again, read in the same instant
  local snapshot = redis.call('HGET', KEYS[1], 's')
  return {'conflict', current, snapshot, redis.call('GET', KEYS[2])}
end
local version = tostring(tonumber(current) + 1)
local ttl = tonumber(ARGV[6])
redis.call('HSET', KEYS[1], 'v', version, 's', ARGV[2])
if ARGV[13] ~= '' then redis.call('HSET', KEYS[1], 'x', ARGV[13]) end
local ended = ''
if ARGV[14] == '1' then
  ended = redis.call('HGET', KEYS[1], 'e')
  if not ended then
    local t = redis.call('TIME')
    ended = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    redis.call('HSET', KEYS[1], 'e', ended)
  end
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[3], 'EX', ttl)
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
end
local events = tonumber(ARGV[9])
for i = 1, events do
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'e', ARGV[14 + i])
end
-- every commit sets the window from now (an EXPIRE of a missing key does nothing): the live
-- session's, or, from the commit that ended it, the replay window alone
local window = ARGV[8]
redis.call('EXPIRE', KEYS[3], window)
redis.call('EXPIRE', KEYS[4], window)
redis.call('EXPIRE', KEYS[6], window)
local first = 15 + events
local notices = tonumber(ARGV[10])
local dropped = 0
if notices > 0 then
  -- The backlog (decision 162): at most ARGV[11] events, but an event marked '1' (a lifecycle
  -- or terminal one) is always kept. When full, the events already sent (below `next`) make
  -- room first, then the oldest waiting event that is not marked (never `next`, which may be
  -- under way). A dropped event's gap is counted on the kept event right after it (state field
  -- `d<seq>`: that many events just before it were dropped), or, when none is kept after it
  -- yet, in `dt` for the next one stored; `dropped` counts them all.
  local cap = tonumber(ARGV[11])
  local sent = tonumber(redis.call('HGET', KEYS[8], 'next') or '1')
  if redis.call('HLEN', KEYS[7]) + notices > cap then
    for _, seq in ipairs(redis.call('HKEYS', KEYS[7])) do
      if tonumber(seq) < sent then
        redis.call('HDEL', KEYS[7], seq)
        redis.call('HDEL', KEYS[8], seq, 'd' .. seq)
      end
    end
  end
  local lasting = {}
  for seq in string.gmatch(redis.call('HGET', KEYS[8], 'lasting') or '', '%d+') do
    lasting[tonumber(seq)] = true
  end
  local waiting = nil -- the kept seqs after `next`, ascending; read once, when first needed
  local function drop_oldest()
    if waiting == nil then
      waiting = {}
      for _, seq in ipairs(redis.call('HKEYS', KEYS[7])) do
        if tonumber(seq) > sent then waiting[#waiting + 1] = tonumber(seq) end
      end
      table.sort(waiting)
    end
    for i, seq in ipairs(waiting) do
      if not lasting[seq] then
        table.remove(waiting, i)
        local gap = 1 + tonumber(redis.call('HGET', KEYS[8], 'd' .. seq) or '0')
        redis.call('HDEL', KEYS[7], seq)
        redis.call('HDEL', KEYS[8], seq, 'd' .. seq)
        local after = waiting[i]
        redis.call('HINCRBY', KEYS[8], after and ('d' .. after) or 'dt', gap)
        return true
      end
    end
    return false
  end
  for i = first, first + 3 * notices - 1, 3 do
    local lasts = ARGV[i + 2] == '1'
    local keep = true
    if redis.call('HLEN', KEYS[7]) >= cap then
      if drop_oldest() then
        dropped = dropped + 1
      elseif not lasts then
        keep = false -- nothing older may go: this one is dropped, its gap waits for the next
        redis.call('HINCRBY', KEYS[8], 'dt', 1)
        dropped = dropped + 1
      end
    end
    if keep then
      redis.call('HSET', KEYS[7], ARGV[i], ARGV[i + 1])
      local tail = redis.call('HGET', KEYS[8], 'dt')
      if tail then
        redis.call('HINCRBY', KEYS[8], 'd' .. ARGV[i], tonumber(tail))
        redis.call('HDEL', KEYS[8], 'dt')
      end
      if lasts then
        lasting[tonumber(ARGV[i])] = true
        local listed = redis.call('HGET', KEYS[8], 'lasting')
        redis.call('HSET', KEYS[8], 'lasting', listed and (listed .. ',' .. ARGV[i]) or ARGV[i])
      end
      if waiting ~= nil then waiting[#waiting + 1] = tonumber(ARGV[i]) end
    end
  end
  if dropped > 0 then redis.call('HINCRBY', KEYS[8], 'dropped', dropped) end
  redis.call('EXPIRE', KEYS[7], ARGV[12])
  redis.call('EXPIRE', KEYS[8], ARGV[12])
end
first = first + 3 * notices
if #ARGV >= first then
  for i = first, #ARGV, 2 do
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', KEYS[5], ttl)
end
return {'ok', version, dropped, ended}
