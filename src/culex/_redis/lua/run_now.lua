#!lua
-- run_now: make one scheduled task (delayed, or waiting out a retry's back-off) ready now,
-- as the dashboard's "run now" does. It goes to waiting (or its group's ready set) with the
-- server's time as its ready time, after the tasks ready before it at its priority, exactly
-- as claim.lua promotes a due one (include/priority.lua), and the queue is signalled. A task
-- that is not scheduled (in the scheduled zset, and its hash says so) is refused and
-- nothing is written: it ran, was cancelled or was made due meanwhile.
--
-- KEYS[1] task hash
-- KEYS[2] scheduled zset
-- KEYS[3] waiting zset
-- KEYS[4] signal list
-- KEYS[5] groups prefix <prefix>:{<queue>}:groups:   optional: a task of a group goes to
--         its group's ready set (include/groups.lua)
-- ARGV[1] id
-- Returns: "waiting" when the task was moved; else the state it is in ("waiting",
--          "pending", "dead", "succeeded"...), "" when it has no hash, or "not scheduled"
--          when its hash says scheduled but no scheduled zset holds it. Only "waiting"
--          after a move writes anything.

-- >>> include/priority.lua
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

-- (left out here, not called by this script: ready_set, unready, group_ended)
-- <<< include/groups.lua

local id = ARGV[1]
local state = redis.pcall('HGET', KEYS[1], 'state')
if type(state) ~= 'string' then state = '' end  -- (no hash, or not a hash)
local due = redis.call('ZSCORE', KEYS[2], id)
if state ~= 'scheduled' or not due then
  -- (a hash that says scheduled while the task is in no scheduled set: its place is
  -- unknown, so it is left as it is and the caller is told it is not scheduled)
  if state == 'scheduled' then return 'not scheduled' end
  return state
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- a task already due keeps its ready time; one due later is ready now
local ready = tonumber(due)
if not ready or ready ~= ready or ready > now then ready = now end
if ready < 0 then ready = 0 end
local f = redis.call('HMGET', KEYS[1], 'priority', 'group')
redis.call('ZREM', KEYS[2], id)
make_ready(KEYS[3], KEYS[5], id, waiting_score(ready, f[1]), f[2], t[1] * 1000000 + t[2])
redis.call('HSET', KEYS[1], 'state', 'waiting', 'due_at', string.format('%.0f', ready))
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
return 'waiting'
