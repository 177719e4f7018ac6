-- release: hand a pending task back to waiting at once without counting a failure
-- (a runner stopping gracefully). Its ready time and priority are kept so it keeps its
-- place in line (include/priority.lua).
--
-- KEYS[1] task hash
-- KEYS[2] pending zset
-- KEYS[3] waiting zset
-- KEYS[4] signal list
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in complete
-- Returns: 1 when released; 0 when refused (stale attempt or not pending).

-- >>> include/priority.lua
-- waiting is one sorted set: a task's score is ready_ms - priority * 2^42, so ZPOPMIN takes
-- the highest priority first and, within one priority, the earliest ready (2^42 ms is the
-- year 2109; scores stay whole numbers well below 2^53, where doubles are exact). Priority
-- 0, every task's without a `priority` field, scores its ready time as before priorities.
-- A priority that is not a whole number in -100 .. 100 counts as 0: a script must not stop
-- half-way on a field a foreign producer wrote. '%.0f': Lua's own number to text conversion
-- may round a number of 15 or more digits.
local function waiting_score(ready_ms, priority)
  local p = tonumber(priority)
  if not p or p ~= math.floor(p) or p < -100 or p > 100 then p = 0 end
  return string.format('%.0f', ready_ms - p * 4398046511104)
end
-- <<< include/priority.lua

local f = redis.call('HMGET', KEYS[1], 'attempt', 'state', 'enqueue_time', 'due_at',
  'priority')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'waiting')
redis.call('ZADD', KEYS[3], waiting_score(tonumber(f[4] or f[3] or 0) or 0, f[5]), ARGV[1])
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
return 1
