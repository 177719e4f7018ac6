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
-- KEYS[6] scheduled zset  optional: needed only with a delay (ARGV[3])
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in complete
-- ARGV[3] delay_ms        optional: "" or absent: 0, back to waiting at its place in line.
--         Above 0 (a whole number up to 2^42 - 1, with KEYS[6]): to scheduled, due that
--         many ms from now (a runner that must end its process to stop a thread still
--         running the task hands it back so: no other runner starts it before the process
--         is gone)
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

-- (left out here, not called by this script: ready_set, unready)
-- <<< include/groups.lua

-- >>> include/numbers.lua
-- MOST = 2^42 - 1, the largest whole number a script takes where its header says no other
-- bound: a ready time (ms since the epoch, below 2^42: include/priority.lua), a duration in
-- ms, a count. Such a number, and the sum of two, has at most 13 digits: Lua's own number
-- to text conversion (14 digits) writes it back exactly, into a field, a score or a TTL.
local MOST = 4398046511103

-- A Lua number given to redis.call is written out by the server: Redis before 7.2 does it
-- with printf('%.17g'), a few thousand instructions a number (a tenth of a one-call
-- enqueue's script), where Valkey and Redis 7.2 on write a whole number as an integer for
-- next to nothing. So, on an older server, the hot scripts give their commands the time as
-- text cut from TIME's own digits (t[1] .. string.sub('000' .. string.sub(t[2], 1, -4),
-- -3) is t[1] * 1000 + math.floor(t[2] / 1000), written out), and the whole numbers they
-- write as such text. (Written out where needed, not as a function: a closure made per
-- call costs the garbage collector more than the expression.)
local NUMBERS_AS_TEXT = redis.REDIS_VERSION_NUM < 0x070200

-- `text` (an ARGV or a hash field) as a whole number in lo .. hi, or nil. Only decimal
-- digits, with a '-' before them, make one: Lua's tonumber also takes 'nan', 'inf',
-- '0x10', ' 5 ', '1e3' and fractions.
local function whole(text, lo, hi)
  if type(text) ~= 'string' or #text > 16 or not string.match(text, '^%-?%d+$') then
    return nil
  end
  local n = tonumber(text)
  if n < lo or n > hi then return nil end
  return n
end

-- ARGV[i], the number `name` of `script`, as a whole number in lo .. hi; "" or no ARGV[i]
-- stands for `absent` when that is not nil (false: no number). Anything else stops the
-- script with an error that names the script, the position and the rule. Every script
-- checks its ARGV this way before its first write, so a refused call writes nothing.
local function argv_whole(script, i, name, lo, hi, absent)
  local text = ARGV[i]
  if absent ~= nil and (text == nil or text == '') then return absent end
  local n = whole(text, lo, hi)
  if not n then
    error({err = string.format('ERR %s: ARGV[%d] %s must be a whole number in %.0f .. %.0f%s,'
      .. ' got "%s"', script, i, name, lo, hi, absent ~= nil and ' (or "")' or '',
      string.sub(tostring(text), 1, 40))})
  end
  return n
end
-- <<< include/numbers.lua

local delay = argv_whole('release', 3, 'delay_ms', 0, MOST, 0)
if delay > 0 and not KEYS[6] then
  return redis.error_reply('ERR release: a delay (ARGV[3]) takes KEYS[6], the scheduled set')
end
local f = redis.call('HMGET', KEYS[1], 'attempt', 'state', 'enqueue_time', 'due_at',
  'priority', 'group', 'group_held', 'cancel_requested')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' or f[8] then
  return 0
end
local t = redis.call('TIME')
-- Its ready time: due_at, else enqueue_time, else now, the first that is a whole number in
-- 0 .. MOST (a field a foreign producer wrote must not stop the release half-way).
local ready = whole(f[4], 0, MOST) or whole(f[3], 0, MOST)
  or t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
if f[7] == '1' then
  group_ended(KEYS[5], KEYS[1], f[6], nil, t[1] * 1000000 + t[2])
end
if delay > 0 then
  local due = t[1] * 1000 + math.floor(t[2] / 1000) + delay
  redis.call('HSET', KEYS[1], 'state', 'scheduled', 'due_at', due)
  redis.call('ZADD', KEYS[6], due, ARGV[1])
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'waiting')
make_ready(KEYS[3], KEYS[5], ARGV[1], waiting_score(ready, f[5]), f[6], t[1] * 1000000 + t[2])
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
return 1
