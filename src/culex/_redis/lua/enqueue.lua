#!lua
-- enqueue: store a new task and put it in waiting (ready now) or scheduled (due later).
--
-- KEYS[1] task hash      <prefix>:{<queue>}:task:<id>
-- KEYS[2] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[3] scheduled zset <prefix>:{<queue>}:scheduled
-- KEYS[4] signal list    <prefix>:{<queue>}:signal   (wakes idle runners)
-- KEYS[5] dedupe hash    <prefix>:{<queue>}:dedupe   optional: needed only with a dedupe
--                        key (ARGV[10]); maps each key to the live task enqueued with it
-- KEYS[6] task key prefix <prefix>:{<queue>}:task:   optional, as KEYS[5]: where the task
--                        that holds the dedupe key is read
-- KEYS[7] groups prefix  <prefix>:{<queue>}:groups:   optional: needed only with a group
--         (ARGV[11]): the task waits in its group's ready set (include/groups.lua)
-- KEYS[8] dead zset      <prefix>:{<queue>}:dead   optional: an id still in dead whose hash
--         has expired (dead is trimmed only when a task dies) leaves it, so that the new
--         task is in one set only. Left out (with 5 to 7 when those are not needed) for an
--         id no task ever had: culex leaves it out for the ids it draws (the common enqueue
--         then runs one command less)
-- KEYS[9] events stream <prefix>:{<queue>}:events   optional (with KEYS[5] to KEYS[8]):
--         the task's `enqueued` event, attempt 0 (include/events.lua)
-- ARGV[1] id
-- ARGV[2] type           the job class name, e.g. "SendEmailJob"
-- ARGV[3] queue          the queue name (stored for producers and dashboards)
-- ARGV[4] params         a JSON object
-- ARGV[5] due_ms         absolute due time in ms since the epoch, or "" for "now + delay_ms"
--                        (a whole number in 0 .. 2^42 - 1)
-- ARGV[6] delay_ms       used when due_ms is ""; 0 means now (a whole number >= 0, with
--                        now + delay_ms below 2^42; "" counts as 0)
-- ARGV[7] max_retries    retries after the first attempt (the job's max_retries), a whole
--                        number in 0 .. 2^42 - 1
-- ARGV[8] trace          optional: the producer's trace context, a JSON object of
--                        propagation fields (W3C traceparent, tracestate); stored as the
--                        field `trace` when given and not ""
-- ARGV[9] priority       optional: a whole number in -100 .. 100, higher runs first; ""
--                        or absent: 0. Stored as the field `priority` unless 0; the task's
--                        score in waiting is ready_ms - priority * 2^42 (include/priority.lua)
-- ARGV[10] dedupe_key    optional: 1 to 500 bytes, "" or absent for none. While the task
--                        that holds this key (KEYS[5]) is waiting, scheduled or pending,
--                        nothing is stored and the reply names that task; otherwise the
--                        new task takes the key (field `dedupe_key`). A key whose task has
--                        ended or is gone counts as free, unless its window (ARGV[14]) is
--                        still open: then too the reply names that task.
-- ARGV[11] group        optional: 1 to 500 bytes, "" or absent for none. A task of a group
--                        waits in its group's ready set; claim takes the groups in turns,
--                        within the queue's group limits (docs/flow-control.md)
-- ARGV[12] expires_ms   optional: the task expires this many ms from now (the server's
--                        clock), a whole number in 0 .. 2^42 - 1 - now; "" or absent: never.
--                        Stored as the field `expires_at` (ms since the epoch): claim buries
--                        a task it takes after that time dead with last_error "expired"
-- ARGV[13] headers      optional: the task's headers, a JSON object of string values
--                        (middleware's, docs/middleware.md), "" or absent for none. Stored
--                        as the field `headers` when given and not ""
-- ARGV[14] dedupe_for_ms optional: with a dedupe key, the key stays the task's this many ms
--                        after it ended (succeeded, dead or cancelled; a deleted task frees it
--                        at once): a whole number in 1 .. 2^42 - 1, "" or absent: none.
--                        Stored as the field `dedupe_for`; the task that ends notes the
--                        window's end in <dedupe>:windows (include/dedupe.lua)
-- ARGV 8 to 14 may all be left out (seven ARGV): the common enqueue sends none of them, and
-- the script then skips their checks
-- Returns: {state, id} where state is "waiting" or "scheduled";
--          {"exists", id} when a task with this id already exists (nothing changes:
--          client-made ids make enqueue idempotent);
--          {"deduped", id of the task that holds the dedupe key} (nothing changes but
--          the windows that have ended: include/dedupe.lua's prune_windows).
-- An error, and nothing written, for a bad number (include/numbers.lua), a bad priority, a
-- bad dedupe key, a dedupe key without KEYS[5] and KEYS[6], or a window without a key.

-- The includes are copied into the branches that need them (the numbers' checks, dedupe,
-- priority and groups, events), so that the common enqueue makes none of their functions
-- (a closure made per call, that the garbage collector then collects, costs about as much
-- as a command's own work).
local events_key = KEYS[9]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- (what the commands get for now: the number, or its text. NUMBERS_AS_TEXT is
-- include/numbers.lua's, written out here: that include comes only with the checks below)
local NUMBERS_AS_TEXT = redis.REDIS_VERSION_NUM < 0x070200
local now_arg = NUMBERS_AS_TEXT and t[1] .. string.sub('000' .. string.sub(t[2], 1, -4), -3)
  or now
local due = now
local trace, priority, dedupe, group, expires, window = '', 0, '', '', false, false
local headers, more = '', false
-- The common enqueue (no due time, no delay, a max_retries of up to 12 digits, ARGV 8 to 14
-- left out: the producer sends them only when one is used) needs no check's function; any
-- other goes through argv_whole, which says the rule of a bad number.
local max_retries = ARGV[7]
if ARGV[5] ~= '' or ARGV[6] ~= '' or #ARGV > 7
  or not (max_retries and #max_retries < 13 and string.find(max_retries, '^%d+$')) then
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
  if ARGV[5] ~= '' then
    due = argv_whole('enqueue', 5, 'due_ms', 0, MOST)
  elseif ARGV[6] ~= '' then
    due = now + argv_whole('enqueue', 6, 'delay_ms', 0, MOST - now, 0)
  end
  argv_whole('enqueue', 7, 'max_retries', 0, MOST)
  if #ARGV > 7 then
    trace = ARGV[8] or ''
    headers = ARGV[13] or ''
    -- (each number checked only when given: "" and absent cost no call)
    if ARGV[9] ~= '' then priority = argv_whole('enqueue', 9, 'priority', -100, 100, 0) end
    if ARGV[12] and ARGV[12] ~= '' then
      expires = argv_whole('enqueue', 12, 'expires_ms', 0, MOST - now, false)
    end
    dedupe = ARGV[10] or ''
    if dedupe ~= '' and (#dedupe > 500 or not KEYS[6]) then
      return redis.error_reply('ERR enqueue: a dedupe key (ARGV[10]) takes 1 to 500 bytes and '
        .. 'KEYS[5] and KEYS[6]')
    end
    if ARGV[14] and ARGV[14] ~= '' then
      window = argv_whole('enqueue', 14, 'dedupe_for_ms', 1, MOST, false)
    end
    if window and dedupe == '' then
      return redis.error_reply('ERR enqueue: a dedupe window (ARGV[14]) takes a dedupe key')
    end
    group = ARGV[11] or ''
    if group ~= '' and (#group > 500 or not KEYS[7]) then
      return redis.error_reply('ERR enqueue: a group (ARGV[11]) takes 1 to 500 bytes and KEYS[7]')
    end
    -- the optional fields, stored by the same HSET as the others (a command more per field
    -- would cost more than the table)
    more = {}
    if trace ~= '' then more[#more + 1] = 'trace'; more[#more + 1] = trace end
    if priority ~= 0 then more[#more + 1] = 'priority'; more[#more + 1] = priority end
    if group ~= '' then more[#more + 1] = 'group'; more[#more + 1] = group end
    if expires then more[#more + 1] = 'expires_at'; more[#more + 1] = now + expires end
    if headers ~= '' then more[#more + 1] = 'headers'; more[#more + 1] = headers end
    if dedupe ~= '' then
      more[#more + 1] = 'dedupe_key'; more[#more + 1] = dedupe
      more[#more + 1] = 'on_end'; more[#more + 1] = '1'
      if window then more[#more + 1] = 'dedupe_for'; more[#more + 1] = window end
    end
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists', ARGV[1]}
end
if dedupe ~= '' then
-- >>> include/dedupe.lua
-- The dedupe hash maps a key to the task enqueued with it (enqueue.lua). A task that ends
-- frees its key, only while the key still names it: a later task may have taken it.
-- dedupe_hash nil (a caller that sends fewer keys, e.g. a runner of an older version) or a
-- task without a key costs nothing; enqueue.lua treats a key whose task has ended as free,
-- so a key left behind heals itself. pcall: a dedupe key of another type must not stop
-- the task's own change.
--
-- A task enqueued with a window (its hash's `dedupe_for`, ms) keeps its key for that long
-- after it ends: the entry stays, and the key goes into the windows zset <dedupe>:windows
-- scored by the window's end (ms). task_key nil (delete.lua: a deleted task) frees the key
-- at once. The zset is the same slot's key named from the dedupe hash, so that the six
-- scripts that end a task take no KEY more (keys.py names it too).

-- Drop up to 4 windows that ended before `now`, and their keys' entries while the entry's
-- task is not live (a producer of an older version, that knows no windows, may have given
-- the key to a new task). Every enqueue with a dedupe key calls it, so windows that have
-- ended never pile up beyond those added since the last such enqueue.
local function prune_windows(dedupe_hash, task_prefix, now)
  local windows = dedupe_hash .. ':windows'
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', windows, '-inf', now, 'LIMIT', 0, 4)) do
    redis.call('ZREM', windows, key)
    local holder = redis.call('HGET', dedupe_hash, key)
    local state = holder and redis.pcall('HGET', task_prefix .. holder, 'state')
    if holder and state ~= 'waiting' and state ~= 'scheduled' and state ~= 'pending' then
      redis.call('HDEL', dedupe_hash, key)
    end
  end
end

-- (left out here, not called by this script: free_dedupe)
-- <<< include/dedupe.lua
  local holder = redis.call('HGET', KEYS[5], dedupe)
  if holder then
    local state = redis.pcall('HGET', KEYS[6] .. holder, 'state')
    if state == 'waiting' or state == 'scheduled' or state == 'pending' then
      return {'deduped', holder}
    end
    -- (ended: its window, if it has one, is still open, even when its hash has expired)
    local open = redis.call('ZSCORE', KEYS[5] .. ':windows', dedupe)
    if open and tonumber(open) > now then
      return {'deduped', holder}
    end
  end
  redis.call('ZREM', KEYS[5] .. ':windows', dedupe)  -- (the new task takes the key)
  prune_windows(KEYS[5], KEYS[6], now)
end
if KEYS[8] then  -- (an id left in dead by a task whose hash expired: see KEYS[8])
  redis.call('ZREM', KEYS[8], ARGV[1])
end
local state = 'waiting'
if due > now then
  state = 'scheduled'
end
if more then  -- (the same fields, and the optional ones)
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'type', ARGV[2], 'queue', ARGV[3],
    'params', ARGV[4], 'enqueue_time', now_arg, 'retry_count', '0', 'attempt', '0',
    'max_retries', ARGV[7], 'state', state, 'due_at', due == now and now_arg or due,
    unpack(more))
else
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'type', ARGV[2], 'queue', ARGV[3],
    'params', ARGV[4], 'enqueue_time', now_arg, 'retry_count', '0', 'attempt', '0',
    'max_retries', ARGV[7], 'state', state, 'due_at', due == now and now_arg or due)
end
if dedupe ~= '' then
  redis.call('HSET', KEYS[5], dedupe, ARGV[1])
end
if state == 'waiting' then
  if priority == 0 and group == '' then
    redis.call('ZADD', KEYS[2], now_arg, ARGV[1])
  else
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
    -- (the group's turn, in µs, is needed only with a group)
    make_ready(KEYS[2], KEYS[7], ARGV[1], waiting_score(now, priority), group,
      group ~= '' and t[1] * 1000000 + t[2] or 0)
  end
  -- one token is enough to wake a runner; more would only make idle runners spin
  if redis.call('LLEN', KEYS[4]) == 0 then
    redis.call('RPUSH', KEYS[4], '1')
  end
else
  redis.call('ZADD', KEYS[3], due, ARGV[1])
end
if events_key then
-- >>> include/events.lua
-- Each queue has one stream, <prefix>:{<queue>}:events, an OPTIONAL key of the scripts
-- that change a task's state: a caller that sends it (culex with the setting `events` on)
-- gets one entry per change, written in the same call; one that does not, none. An entry
-- holds no params, result or error: task (the id), job (its type), kind (enqueued,
-- started, succeeded, failed, dead) and attempt; its id (XADD *) is the server's time in
-- ms. The stream keeps about EVENTS_MAX entries (MAXLEN ~: whole nodes go, so trimming
-- costs next to nothing), and, about once in 100 entries (by the server's clock), drops
-- those older than EVENTS_AGE_MS (MINID ~); it expires EVENTS_AGE_MS after its last entry
-- (every key ends). pcall: a key of another type written by something else must not stop
-- a state change half-way; it gets no entry.
local EVENTS_MAX = 10000
local EVENTS_AGE_MS = 86400000
local function emit(stream, id, job, kind, attempt, now)
  if not stream then return end
  redis.pcall('XADD', stream, 'MAXLEN', '~', EVENTS_MAX, '*', 'task', id, 'job', job or '',
    'kind', kind, 'attempt', attempt or 0)
  redis.pcall('PEXPIRE', stream, EVENTS_AGE_MS)
  if now % 100 == 0 then
    redis.pcall('XTRIM', stream, 'MINID', '~', now - EVENTS_AGE_MS)
  end
end
-- <<< include/events.lua
  emit(events_key, ARGV[1], ARGV[2], 'enqueued', 0, now)
end
return {state, ARGV[1]}
