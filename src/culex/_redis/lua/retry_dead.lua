#!lua
-- retry_dead: put dead tasks back in waiting, with their retries restored. A retried task
-- goes to the back of the line (ready now) and must no longer expire. Its `attempt` is
-- kept: attempt numbers only grow, so a report from a run before its death stays refused.
--
-- KEYS[1] dead zset
-- KEYS[2] waiting zset
-- KEYS[3] signal list
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:   (the ids read from dead are unknown to
--         the caller; the prefix keeps every key in the queue's slot)
-- KEYS[5] groups prefix <prefix>:{<queue>}:groups:   optional: a task of a group goes back
--         to its group's ready set (include/groups.lua)
-- ARGV[1] limit           how many ids to look at at most: a whole number in 1 .. 2^42 - 1
--                         (else an error, and nothing written)
-- ARGV[2..] ids           the ids to retry; none: the oldest `limit` ids in dead
-- Returns: {retried, skipped}: two arrays of ids. An id is retried when it is in dead and
--          its hash says state "dead": it leaves dead, its hash is persisted, state
--          "waiting", retry_count 0, retried_at and due_at = now, finished_at, stalls
--          and any cancel_requested removed (a deliberate retry from dead clears an old
--          request)
--          (last_error, failed_at, attempt and priority are kept), and it is added to
--          waiting, ready now at its priority (include/priority.lua). Its dedupe key is not
--          taken again: the key was freed when it died, and may name another task now.
--          Any other id is skipped and changes nothing, except an id in dead whose hash is
--          gone (expired): it can never run, so it is removed from dead. A workflow node
--          (its hash has `run`) is skipped: it runs again with its run
--          (workflow_rearm.lua), which also puts back the nodes that ended because of it.

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

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = argv_whole('retry_dead', 1, 'limit', 1, MOST)  -- (before any write)
local ids = {}
if #ARGV > 1 then
  for i = 2, math.min(#ARGV, limit + 1) do
    ids[#ids + 1] = ARGV[i]
  end
else
  ids = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
end

local retried = {}
local skipped = {}
for _, id in ipairs(ids) do
  local key = KEYS[4] .. id
  local f  -- the hash's state and priority, read once the id is known to be in dead
  if not redis.call('ZSCORE', KEYS[1], id) then
    skipped[#skipped + 1] = id
  elseif redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[1], id)
    skipped[#skipped + 1] = id
  else
    -- (a key of another type: an error, so no state and skipped)
    f = redis.pcall('HMGET', key, 'state', 'priority', 'group', 'run')
  end
  if f and (f['err'] or f[1] ~= 'dead' or f[4]) then
    skipped[#skipped + 1] = id
  elseif f then
    redis.call('ZREM', KEYS[1], id)
    redis.call('PERSIST', key)
    redis.call('HSET', key, 'state', 'waiting', 'retry_count', 0, 'retried_at', now,
      'due_at', now)
    -- (a cancel request left on it is old: an operator's retry from dead runs it again)
    redis.call('HDEL', key, 'finished_at', 'stalls', 'cancel_requested')
    make_ready(KEYS[2], KEYS[5], id, waiting_score(now, f[2]), f[3], t[1] * 1000000 + t[2])
    retried[#retried + 1] = id
  end
end
-- one token is enough to wake a runner; more would only make idle runners spin
if #retried > 0 and redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('RPUSH', KEYS[3], '1')
end
return {retried, skipped}
