#!lua
-- release: hand a pending task back to waiting at once without counting a failure
-- (a runner stopping gracefully). Its ready time and priority are kept so it keeps its
-- place in line (include/priority.lua).
--
-- KEYS[1] task hash
-- KEYS[2] pending zset
-- KEYS[3] waiting zset
-- KEYS[4] signal list
-- KEYS[5] groups prefix <prefix>:{<queue>}:groups:   optional: a task of a group goes back
--         to its group's ready set, and frees its place among its group's running tasks
--         (include/groups.lua)
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in complete
-- Returns: 1 when released; 0 when refused (stale attempt or not pending, or its cancel
--          was requested: cancel.lua. Such a task must not run again: its runner ends it
--          with fail, or, when it cannot, its lease runs out and reclaim sends it to dead).

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

-- >>> include/groups.lua
-- A task enqueued with a group (its hash's `group`) waits in its group's own ready set
-- <groups>g:<group>, not in waiting; <groups>ready lists every grouped ready task (the
-- queue's counts and listings of waiting add it), and the ring <groups>ring holds the
-- groups that have ready tasks, scored by their turn (µs): claim takes one task from the
-- group whose turn is first, then moves it to the back. <groups>running counts each group's
-- tasks in pending. groups is the KEY <prefix>:{<queue>}:groups: (nil: a caller that passes
-- none, written before groups: its tasks go to waiting, as before). Scores are the same as
-- in waiting (include/priority.lua).

-- The sorted set that lists a ready task of `group` for counts and listings.
local function ready_set(waiting, groups, group)
  if groups and group and group ~= '' then
    return groups .. 'ready'
  end
  return waiting
end

-- Make task `id` ready with `score`: in waiting, or in its group's ready set, the grouped
-- ready set and (at the back, if not there yet) the ring. turn_us: the server's time, µs.
-- True when the task went to its group.
local function make_ready(waiting, groups, id, score, group, turn_us)
  if groups and group and group ~= '' then
    redis.call('ZADD', groups .. 'g:' .. group, score, id)
    redis.call('ZADD', groups .. 'ready', score, id)
    redis.call('ZADD', groups .. 'ring', 'NX', turn_us, group)
    return true
  end
  redis.call('ZADD', waiting, score, id)
  return false
end

-- Take ready task `id` out of where it waits (cancel, delete): the set ready_set names,
-- and its group's own set.
local function unready(waiting, groups, id, group)
  redis.call('ZREM', ready_set(waiting, groups, group), id)
  if groups and group and group ~= '' then
    redis.call('ZREM', groups .. 'g:' .. group, id)
  end
end

-- A task that claim took through its group (its hash's group_held=1) left pending: its
-- group runs one task fewer, and, when it has more ready, takes its turn again (a group
-- held back by its concurrency limit left the ring). The hash's mark goes, so a later
-- report of the same task cannot count twice. Wakes an idle runner through `signal`.
local function group_ended(groups, task_key, group, signal, turn_us)
  if not (groups and group and group ~= '') then return end
  redis.call('HDEL', task_key, 'group_held')
  local running = groups .. 'running'
  if redis.call('HINCRBY', running, group, -1) <= 0 then
    redis.call('HDEL', running, group)
  end
  if redis.call('EXISTS', groups .. 'g:' .. group) == 1
      and redis.call('ZADD', groups .. 'ring', 'NX', turn_us, group) == 1
      and signal and redis.call('LLEN', signal) == 0 then
    redis.call('RPUSH', signal, '1')
  end
end
-- <<< include/groups.lua

local f = redis.call('HMGET', KEYS[1], 'attempt', 'state', 'enqueue_time', 'due_at',
  'priority', 'group', 'group_held', 'cancel_requested')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' or f[8] then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'waiting')
local t = redis.call('TIME')
if f[7] == '1' then
  group_ended(KEYS[5], KEYS[1], f[6], nil, t[1] * 1000000 + t[2])
end
make_ready(KEYS[3], KEYS[5], ARGV[1], waiting_score(tonumber(f[4] or f[3] or 0) or 0, f[5]),
  f[6], t[1] * 1000000 + t[2])
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
return 1
