-- Where ready tasks of a group wait, written once: the scripts that make a task ready, take
-- it, or end it carry a copy of this file between `-- >>> include/groups.lua` and
-- `-- <<< include/groups.lua`. Edit this file, then run `python -m culex._redis.assembly`.

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
  -- (pcall: a count that is not a whole number, corrupted or written by something else,
  -- must not stop the script half-way; it is dropped, and the reclaimer's heal recounts it)
  local n = redis.pcall('HINCRBY', running, group, -1)
  if type(n) ~= 'number' or n <= 0 then
    redis.pcall('HDEL', running, group)
  end
  if redis.call('EXISTS', groups .. 'g:' .. group) == 1
      and redis.call('ZADD', groups .. 'ring', 'NX', turn_us, group) == 1
      and signal and redis.call('LLEN', signal) == 0 then
    redis.call('RPUSH', signal, '1')
  end
end
