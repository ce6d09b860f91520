-- An owner's task index for ListTasks: pruned of expired tasks, then the newest `limit` ids
-- with their status time and info (what the filters and the order need), never a task.
-- Atomic: one script on the owner's slot, so the ids and their info are read at one instant.
-- KEYS: 1 the owner's task index, 2 its info, 3 its REJECTED expiries
-- ARGV: 1 now (ms), 2 task lifetime (ms), 3 limit
-- Returns {id, score, id, score, …} (newest first), {info or false, …} (same order)
--! include held_tasks
held_tasks(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
local listed = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
local infos = {}
for first = 1, #listed, 1000 do
  local ids = {}
  for i = first, math.min(first + 999, #listed), 2 do ids[#ids + 1] = listed[i] end
  local got = redis.call('HMGET', KEYS[2], unpack(ids))
  for i = 1, #got do infos[#infos + 1] = got[i] end
end
return {listed, infos}
