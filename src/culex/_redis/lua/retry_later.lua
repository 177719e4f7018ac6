#!lua
-- retry_later: a pending task's job asked to run again later (culex.RetryLater: a remote
-- service said "slow down"). The task goes to scheduled, due after the delay, WITHOUT
-- counting a failed attempt: retry_count, last_error and failed_at stay as they were, and
-- the counters (include/stats.lua) count nothing, since the attempt neither succeeded nor
-- failed. It records retry_later_at (now) and adds 1 to retry_later_count.
--
-- KEYS[1] task hash
-- KEYS[2] pending zset
-- KEYS[3] scheduled zset
-- KEYS[4] control hash <prefix>:{<queue>}:control   optional, with KEYS[5]: a freed slot
--         under the queue's concurrency limit wakes a runner, as in complete)
-- KEYS[5] signal list <prefix>:{<queue>}:signal   optional, with KEYS[4]
-- KEYS[6] groups prefix <prefix>:{<queue>}:groups:   optional: a task that ran as one of
--         its group's frees its place there, as in complete
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in fail
-- ARGV[3] delay_ms        a whole number >= 0: the task is due that long after now
-- Returns: "scheduled"; 0 when refused (stale attempt or not pending). An error, and
--          nothing written, when delay_ms is not a whole number >= 0.

-- >>> include/unblock.lua
-- A claim that left ready tasks in waiting because the queue ran as many as its
-- concurrency limit allows marks blocked=1 in the queue's control hash; a script that takes
-- a task out of pending then wakes one idle runner through the queue's signal list, so the
-- freed slot is taken at once rather than at the runner's next idle_wait. control is nil
-- for a caller that passes no control key (one written before flow control): no wake-up.
local function unblock(control, signal)
  if control and redis.pcall('HDEL', control, 'blocked') == 1 then
    if redis.pcall('LLEN', signal) == 0 then
      redis.pcall('RPUSH', signal, '1')
    end
  end
end
-- <<< include/unblock.lua

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

local delay = tonumber(ARGV[3])
if not delay or delay < 0 or delay ~= math.floor(delay) or delay == math.huge then
  return redis.error_reply('ERR retry_later: delay_ms must be a whole number >= 0, got '
    .. tostring(ARGV[3]))
end
local f = redis.call('HMGET', KEYS[1], 'attempt', 'state', 'group', 'group_held')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
unblock(KEYS[4], KEYS[5])
if f[4] == '1' then
  group_ended(KEYS[6], KEYS[1], f[3], KEYS[5], t[1] * 1000000 + t[2])
end
redis.call('HSET', KEYS[1], 'state', 'scheduled', 'due_at', now + delay, 'retry_later_at', now)
redis.call('HINCRBY', KEYS[1], 'retry_later_count', 1)
redis.call('ZADD', KEYS[3], now + delay, ARGV[1])
return 'scheduled'
