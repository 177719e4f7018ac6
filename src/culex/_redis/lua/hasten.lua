-- hasten: make scheduled tasks due now, due or not (culex.testing's drain runs a retry's
-- back-off or a delayed task at once). Each goes to waiting, after the tasks ready
-- before it at its priority, exactly as claim.lua promotes a due one (include/priority.lua);
-- the queue is signalled.
--
-- KEYS[1] scheduled zset
-- KEYS[2] waiting zset
-- KEYS[3] signal list
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:   (the ids read from scheduled are
--         unknown to the caller)
-- ARGV[1] limit           how many scheduled tasks to move at most (> 0), soonest due first
-- Returns: how many tasks were moved. Moving none writes nothing.

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

local limit = tonumber(ARGV[1])
if not limit or limit < 1 then  -- (before any write)
  return redis.error_reply('ERR hasten: ARGV[1] must be a number > 0')
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local moved = redis.call('ZRANGE', KEYS[1], 0, limit - 1, 'WITHSCORES')
for i = 1, #moved, 2 do
  local id = moved[i]
  -- a task already due keeps its ready time; one due later is ready now
  local ready = math.min(tonumber(moved[i + 1]), now)
  local priority = redis.pcall('HGET', KEYS[4] .. id, 'priority')
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], waiting_score(ready, priority), id)
  redis.call('HSET', KEYS[4] .. id, 'state', 'waiting', 'due_at', ready)
end
if #moved > 0 and redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('RPUSH', KEYS[3], '1')
end
return #moved / 2
