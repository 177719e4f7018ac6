-- A task's place in waiting, written once: enqueue.lua, claim.lua, release.lua,
-- reclaim.lua, retry_dead.lua and hasten.lua each carry a copy of this file between
-- `-- >>> include/priority.lua` and `-- <<< include/priority.lua`. Edit this file, then run
-- `python -m culex._redis.assembly` to refresh the copies. Not a script of its own.

-- waiting is one sorted set: a task's score is ready_ms - priority * 2^42, so ZPOPMIN takes
-- the highest priority first and, within one priority, the earliest ready (2^42 ms is the
-- year 2109; scores stay whole numbers well below 2^53, where doubles are exact). Priority
-- 0, every task's without a `priority` field, scores its ready time as before priorities.
-- A priority that is not a whole number in -100 .. 100 counts as 0: a script must not stop
-- half-way on a field a foreign producer wrote. '%.0f': Lua's own number to text conversion
-- may round a number of 15 or more digits; a ready time alone (13 digits, below 2^42) it
-- writes exactly, so the common case, no priority, skips the formatting.
local function waiting_score(ready_ms, priority)
  if (priority == nil or priority == 0) and type(ready_ms) == 'number' then
    return ready_ms
  end
  local p = tonumber(priority)
  if not p or p ~= math.floor(p) or p < -100 or p > 100 then p = 0 end
  return string.format('%.0f', ready_ms - p * 4398046511104)
end
