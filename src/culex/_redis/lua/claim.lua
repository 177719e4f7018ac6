#!lua
-- claim: promote due scheduled tasks, then take up to `limit` tasks from waiting
-- (highest priority first, then lowest ready time: include/priority.lua), lease them in
-- pending, and return what a runner needs. A workflow node (its hash has `run`) that it
-- buries as broken or as cancelled also gets its outbox entry: include/workflow.lua.
--
-- KEYS[1] waiting zset
-- KEYS[2] pending zset   score: lease deadline in ms
-- KEYS[3] scheduled zset
-- KEYS[4] dead zset
-- KEYS[5] task key prefix <prefix>:{<queue>}:task:   (the ids read from waiting are
--         unknown to the caller; the prefix keeps every key in the queue's slot)
-- KEYS[6] done list prefix <prefix>:{<queue>}:done:   (producers waiting for the end of a
--         task buried as broken are woken through <prefix><id>: see wait.lua)
-- KEYS[7] counters prefix <prefix>:{<queue>}:stats:   (a task buried as broken counts as
--         dead, <type>|d, "" for a type it does not have; in the minute bucket, as in
--         complete)
-- ARGV[1] limit           how many tasks to claim at most (>= 0)
-- ARGV[2] lease_ms
-- ARGV[3] promote_limit   how many due scheduled tasks to promote at most
-- ARGV[4] dead_ttl_ms     for an id found in waiting without its hash
-- Flow control (docs/flow-control.md); the keys and ARGV below are optional: a claim
-- without them ignores pause and limits, as before flow control.
-- KEYS[8] control hash <prefix>:{<queue>}:control   optional: paused=1 holds every task back; rate,
--         rate_ms and concurrency, when present, replace ARGV[5..7] (culex.limit; "0":
--         no limit); the claim sets blocked=1 when the concurrency limit holds ready tasks
--         back (include/unblock.lua: the script that frees a slot wakes a runner)
-- KEYS[9] starts zset <prefix>:{<queue>}:starts   optional: the rate limit's window: one member
--         <id>:<attempt> per task started, scored by its start (ms); kept rate_ms
-- KEYS[10] dedupe hash <prefix>:{<queue>}:dedupe   optional: a task buried as broken frees
--         its dedupe key there (include/dedupe.lua)
-- ARGV[5] rate            optional: the most starts in any window of rate_ms (0: none)
-- ARGV[6] rate_ms         optional: the window, ms >= 1 when rate > 0
-- ARGV[7] concurrency     optional: the most tasks pending at once, across runners (0: none)
-- KEYS[11] groups prefix <prefix>:{<queue>}:groups:   optional: the ready sets of the
--         queue's groups, their ring, running counts, rate windows and the groups held back
--         until a time (include/groups.lua); with it, the groups and the tasks without a
--         group (one more turn in the ring, '') are taken in turns, one task a turn
-- KEYS[12] cancels zset <prefix>:{<queue>}:cancels   optional, with KEYS[13]: a ready task
--         whose hash still has cancel_requested (cancel.lua: asked while it ran, then put
--         back by a script that did not honour it, e.g. an older runner's push-back or
--         hand-back) is not run: it goes to dead with that reason, as cancel ends a
--         waiting task (no counter: it did not run again), and leaves this set
-- KEYS[13] periodic record prefix <prefix>:{<queue>}:periodic:   optional, with KEYS[12]: a
--         periodic job's task cancelled so writes last_outcome dead there (as cancel)
-- KEYS[14] events stream <prefix>:{<queue>}:events   optional (with KEYS[8] to KEYS[13]):
--         each task started gets its `started` event (its new attempt), each task buried
--         (broken: attempt 0; cancelled, expired: its last attempt) its `dead` event
--         (include/events.lua)
-- ARGV[8] group_concurrency  optional: the most tasks of one group pending at once (0: none)
-- ARGV[9] group_rate         optional: the most starts of one group in any window of
--                            group_rate_ms (0: none)
-- ARGV[10] group_rate_ms     optional: that window, ms >= 1 with a group rate
-- ARGV[11] say_hold          optional: "1": when the queue's rate limit holds ready tasks
--                            back, the reply ends with one more element, a number after
--                            the tasks: when the next start is allowed (ms). A runner
--                            then skips the queue until that time instead of claiming it
--                            again at each wake-up.
-- ARGV[12] say_dead          optional: "1": the reply also names each task this claim
--                            buried (broken, cancelled, expired: below), as {id, type,
--                            last_error} among the tasks (three fields: a task has nine or
--                            ten), so that the runner that buried it tells its middleware
--                            (on_dead)
-- (the control hash's group_concurrency, group_rate and group_rate_ms replace them, as its
-- rate and concurrency replace ARGV[5..7])
-- Returns: {now_us, next_ms or -1, task, task, ...} where each task is
--          {id, attempt, type, params, retry_count, max_retries, enqueue_time, trace, run, headers}
--          (trace: the producer's trace context, "" for none; run: the workflow run of a
--          node, "" for a task that is not one; headers: the task's, enqueue.lua's ARGV[13],
--          left out when it has none: the task has 9 fields then), and next_ms is when to
--          claim again: the next scheduled task's due time or, when the rate limit holds
--          ready tasks back, when the next start is allowed (of the queue, or of a group
--          held back by its rate), whichever is sooner; with ARGV[11], then the hold.
-- A task whose hash has `expires_at` (ms, enqueue.lua's ARGV[12]) at or before now is not
-- handed out: it goes to dead with last_error "expired", as a cancelled one does (KEYS[12]),
-- and counts as dead (<type>|d). An expires_at that is not a whole number is no expiry.
-- An empty claim writes nothing but its bookkeeping (the promotion of due tasks, the
-- blocked mark, the window's trim). now_us is the server time in microseconds: a runner
-- times its wait for the next due task from it (ms would make it up to 1 ms late).

-- >>> include/wake.lua
-- A task whose hash has waited=1 (wait.lua) has producers blocked on its done list: one
-- element there wakes them all, since each waits with BLMOVE from the list to itself,
-- which puts the element back. The list expires with the task's hash (ttl ms).
local function wake(task_key, done_key, ttl)
  if redis.call('HDEL', task_key, 'waited') == 1 then
    redis.call('RPUSH', done_key, 'done')
    redis.call('PEXPIRE', done_key, ttl)
  end
end
-- <<< include/wake.lua

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
local function free_dedupe(dedupe_hash, key, id, task_key)
  if not (dedupe_hash and key and redis.pcall('HGET', dedupe_hash, key) == id) then
    return
  end
  -- (digits only, at most 13: a foreign 'inf' or '1e400' must not make a window forever)
  local w = task_key and redis.pcall('HGET', task_key, 'dedupe_for')
  local window = type(w) == 'string' and #w <= 13 and string.match(w, '^%d+$') and tonumber(w)
  if window and window > 0 then
    local t = redis.call('TIME')
    redis.pcall('ZADD', dedupe_hash .. ':windows', t[1] * 1000 + math.floor(t[2] / 1000)
      + window, key)
    return
  end
  redis.pcall('HDEL', dedupe_hash, key)
end

-- (left out here, not called by this script: prune_windows)
-- <<< include/dedupe.lua

-- >>> include/stats.lua
-- Counters of a queue, per job type: <job>|<o><b> counts the attempts that ended with
-- outcome <o> (s succeeded, f failed, d dead) and a run time in bucket <b> (0 .. 13: up to
-- 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30, 60, 300 s; 14: above), <job>|<o>
-- those with no run time known; <job>|ms sums the run times. A script adds what one call
-- ended to a Lua table with count(), then writes it once with write_counts(): one HINCRBY
-- per field and hash, however many tasks, and none for a sum that stayed 0.
-- An attempt's run time in ms from its hash's started_at (set by claim), or nil when that
-- is missing or not a time; 0 when the server's clock went back.

-- The run-time bucket of run_ms: 0 .. 13 for at most 5, 10, 25, 50, 100, 250, 500 ms, 1,
-- 2.5, 5, 10, 30, 60, 300 s, 14 above (no table: this runs for every task).
local function bucket(ms)
  if ms <= 100 then
    if ms <= 5 then return 0 elseif ms <= 10 then return 1 elseif ms <= 25 then return 2
    elseif ms <= 50 then return 3 else return 4 end
  elseif ms <= 5000 then
    if ms <= 250 then return 5 elseif ms <= 500 then return 6 elseif ms <= 1000 then return 7
    elseif ms <= 2500 then return 8 else return 9 end
  elseif ms <= 10000 then return 10 elseif ms <= 30000 then return 11
  elseif ms <= 60000 then return 12 elseif ms <= 300000 then return 13 end
  return 14
end

-- One task of `job` ended with outcome `o` ('s', 'f' or 'd'); run_ms is its attempt's run
-- time (nil: unknown). The tally holds a table per job: per outcome, run-time bucket (or
-- 'x': no run time) -> count; and 'ms', the summed run time. No string is made per task.
local function count(tally, job, o, run_ms)
  local t = tally[job]
  if not t then
    t = {s = {}, f = {}, d = {}, ms = 0}
    tally[job] = t
  end
  local b = 'x'
  if run_ms then
    b = bucket(run_ms)
    t.ms = t.ms + run_ms
  end
  t[o][b] = (t[o][b] or 0) + 1
end

-- The tally as a list: field, count, field, count, ...
local function flat(tally)
  local out = {}
  for job, t in pairs(tally) do
    for o, counts in pairs({s = t.s, f = t.f, d = t.d}) do
      for b, n in pairs(counts) do
        out[#out + 1] = job .. '|' .. o .. (b == 'x' and '' or b)
        out[#out + 1] = n
      end
    end
    if t.ms ~= 0 then
      out[#out + 1] = job .. '|ms'
      out[#out + 1] = t.ms
    end
  end
  return out
end

-- Add the minute bucket <prefix>m:<start> to its hour bucket <prefix>h:<start of hour> and
-- to <prefix>total: the minute has ended, and no script writes to it again. The hour
-- expires 8 days after, the minute 2 days after.
local function fold(prefix, start, total)
  local minute = prefix .. 'm:' .. start
  local f = redis.pcall('HGETALL', minute)
  if f['err'] then return end
  local hour = prefix .. 'h:' .. (start - start % 3600)
  for i = 1, #f, 2 do
    redis.pcall('HINCRBY', hour, f[i], f[i + 1])
    redis.pcall('HINCRBY', total, f[i], f[i + 1])
  end
  redis.pcall('PEXPIRE', hour, 691200000)
  redis.pcall('PEXPIRE', minute, 172800000)
end

-- Add the tally to the minute bucket <prefix>m:<start s>, one HINCRBY per field, however
-- many tasks. The hour bucket and <prefix>total get a minute once it has ended: the first
-- write that makes a field in a later minute folds the one that <prefix>total's field
-- `minute` names into them, and names its own (the reads add the minute not yet folded).
-- A minute expires 2 days after it was folded. pcall: a counters key that holds another
-- type is skipped; counting never stops a task's own report.
local function write_counts(prefix, now_ms, tally)
  if next(tally) == nil then return end
  local s = math.floor(now_ms / 1000)
  local start = s - s % 60
  local minute = prefix .. 'm:' .. start
  local made = false
  local counts = flat(tally)
  for i = 1, #counts, 2 do
    made = redis.pcall('HINCRBY', minute, counts[i], counts[i + 1]) == counts[i + 1] or made
  end
  if not made then return end  -- (the minute and its fields were there: nothing to fold)
  local total = prefix .. 'total'
  local last = tonumber(redis.pcall('HGET', total, 'minute'))
  if not last or last < start then
    if last then fold(prefix, last, total) end
    local named = redis.pcall('HSET', total, 'minute', start)
    if type(named) == 'table' and named['err'] then  -- (no totals: the minute must end)
      redis.pcall('PEXPIRE', minute, 172800000)
    end
  elseif last > start then
    -- The server's clock went back to a minute that is folded or will never be: this
    -- call's counts go to its hour and the totals at once.
    local hour = prefix .. 'h:' .. (start - start % 3600)
    for i = 1, #counts, 2 do
      redis.pcall('HINCRBY', hour, counts[i], counts[i + 1])
      redis.pcall('HINCRBY', total, counts[i], counts[i + 1])
    end
    redis.pcall('PEXPIRE', hour, 691200000)
    redis.pcall('PEXPIRE', minute, 172800000)
  end
end

-- (left out here, not called by this script: run_time)
-- <<< include/stats.lua

-- >>> include/workflow.lua
-- A workflow node is an ordinary task whose hash also has `run` (its workflow run's id:
-- the mark of a node), `node` (its name in the run), `policy`, `up` and `down` (JSON lists
-- of its upstreams and its downstreams, `[[queue, task_id], ...]`) and on_end=1. A node
-- whose upstreams have not all ended says state `blocked`: its hash exists, its id is in
-- no set, <base>waits:<id> (a set) holds the upstream ids it still waits for and
-- <base>upstream:<id> (a hash) what its upstreams ended with. <base> is the task key
-- prefix <prefix>:{<queue>}:task: without its `task:`, so every key below stays in the
-- queue's slot, and no script takes a key more for them.
--
-- When a node ends, succeeded or dead for any reason, the script that ends it writes, in
-- the same call, after the task's own change and only when that change happened (a
-- refused report writes nothing), an outbox entry that a runner applies later to the
-- node's downstreams and its run:
--   <base>outbox       ZSET: member the id, score now (ms, the server's clock): the time
--                      from which a runner may take the entry
--   <base>outbox:<id>  HASH, written after a DEL of any older entry of the id: run, node
--                      (the id when the hash has none), down ("[]" when none), type
--                      (the job type, for reading the result typed), state
--                      (succeeded or dead), result (the result's JSON text, only when
--                      succeeded) or error (the reason it died, its last_error, only when
--                      dead), at (now)

-- Task `id` ended with state 'succeeded' (result: its JSON text) or 'dead' (err: its
-- last_error). A node (its hash has `run`) gets its outbox entry, and the reply is true;
-- any other task (or a task prefix that is nil or does not end in task:) writes nothing,
-- and the reply is false. pcall: a task key or an outbox of another type must not stop the
-- script after the task's own change.
local function node_ended(task_prefix, id, state, result, err, now)
  local base = task_prefix and string.match(task_prefix, '^(.*)task:$')
  if not base then return false end
  local f = redis.pcall('HMGET', task_prefix .. id, 'run', 'node', 'down', 'type')
  if f['err'] or not f[1] then return false end
  local entry = base .. 'outbox:' .. id
  redis.call('DEL', entry)
  redis.call('HSET', entry, 'run', f[1], 'node', f[2] or id, 'down', f[3] or '[]',
    'state', state, 'at', now, 'type', f[4] or '')
  if state == 'succeeded' then
    redis.call('HSET', entry, 'result', result)
  else
    redis.call('HSET', entry, 'error', err)
  end
  redis.pcall('ZADD', base .. 'outbox', now, id)
  return true
end

-- (left out here, not called by this script: task_prefix_of, node_forget)
-- <<< include/workflow.lua

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

local events_key = KEYS[14]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- (what the commands get for now: the number, or its text: include/numbers.lua)
local now_arg = NUMBERS_AS_TEXT and t[1] .. string.sub('000' .. string.sub(t[2], 1, -4), -3)
  or now
-- (every number checked before any write: include/numbers.lua)
local limit = argv_whole('claim', 1, 'limit', 0, MOST)
local lease = argv_whole('claim', 2, 'lease_ms', 0, MOST)
local promote_limit = argv_whole('claim', 3, 'promote_limit', 0, MOST)
local dead_ttl = argv_whole('claim', 4, 'dead_ttl_ms', 1, MOST)
if not KEYS[7] then
  return redis.error_reply('ERR claim takes 7 keys: the counters prefix is KEYS[7]')
end
local rate = argv_whole('claim', 5, 'rate', 0, MOST, 0)
local rate_ms = argv_whole('claim', 6, 'rate_ms', 0, MOST, 0)
local concurrency = argv_whole('claim', 7, 'concurrency', 0, MOST, 0)
local group_concurrency = argv_whole('claim', 8, 'group_concurrency', 0, MOST, 0)
local group_rate = argv_whole('claim', 9, 'group_rate', 0, MOST, 0)
local group_rate_ms = argv_whole('claim', 10, 'group_rate_ms', 0, MOST, 0)
local groups = KEYS[11]
-- One look for the common case, a queue with no control and no groups at work: none of
-- these keys exists, and nothing more is read of them.
local steered = 0
if groups then
  steered = redis.call('EXISTS', KEYS[8], groups .. 'ring', groups .. 'delayed')
elseif KEYS[8] then
  steered = redis.call('EXISTS', KEYS[8])
end
local control = {}
if steered > 0 then
  control = redis.pcall('HMGET', KEYS[8], 'paused', 'rate', 'rate_ms', 'concurrency',
    'group_concurrency', 'group_rate', 'group_rate_ms')
  if control['err'] then control = {} end  -- (a control key of another type: no control)
  -- (a value there that is not a whole number in 0 .. MOST refuses the claim, below: the
  -- limits are the operator's, and queue_control.lua writes no other)
  local function limit_of(i) return control[i] and (whole(control[i], 0, MOST) or false) end
  if control[2] and control[3] then rate, rate_ms = limit_of(2), limit_of(3) end
  if control[4] then concurrency = limit_of(4) end
  if control[5] then group_concurrency = limit_of(5) end
  if control[6] and control[7] then
    group_rate, group_rate_ms = limit_of(6), limit_of(7)
  end
end
if not (rate and rate_ms and concurrency) or (rate > 0 and rate_ms < 1) then
  return redis.error_reply('ERR claim: rate, rate_ms and concurrency must be whole numbers '
    .. 'in 0 .. 2^42 - 1, rate_ms >= 1 with a rate')
end
if not (group_concurrency and group_rate and group_rate_ms)
    or (group_rate > 0 and group_rate_ms < 1) then
  return redis.error_reply('ERR claim: group_concurrency, group_rate and group_rate_ms must '
    .. 'be whole numbers in 0 .. 2^42 - 1, group_rate_ms >= 1 with a group rate')
end
if rate > 0 and not KEYS[9] then
  return redis.error_reply('ERR claim: a rate limit needs the starts key, KEYS[9]')
end
local turn = t[1] * 1000000 + t[2]  -- a group's place in the ring: the back, now (µs)

local due = redis.call('ZRANGE', KEYS[3], '-inf', now, 'BYSCORE', 'LIMIT', 0,
  promote_limit, 'WITHSCORES')
for i = 1, #due, 2 do
  local id = due[i]
  -- (pcall: a key of another type is no priority; the claim below buries it)
  local f = redis.pcall('HMGET', KEYS[5] .. id, 'priority', 'group')
  if f['err'] then f = {} end
  redis.call('ZREM', KEYS[3], id)
  local ready = math.max(0, tonumber(due[i + 1]))  -- (a score of -inf a foreign client wrote)
  if make_ready(KEYS[1], groups, id, waiting_score(ready, f[1]), f[2], turn) then
    steered = steered + 1  -- (a group's task is ready: its ring exists now)
  end
  redis.pcall('HSET', KEYS[5] .. id, 'state', 'waiting')  -- (another type: buried below)
end
-- Whether the queue has groups at work (ready in the ring, or held back by their rate);
-- a claim of a queue without groups looks at nothing more of them. (A group held back by
-- its concurrency limit comes back to the ring when one of its tasks ends.)
local grouped = steered > 0 and groups
  and redis.call('EXISTS', groups .. 'ring', groups .. 'delayed') > 0
if grouped then  -- groups held back by their rate whose window has moved on: back in turn
  local back = redis.call('ZRANGE', groups .. 'delayed', '-inf', now, 'BYSCORE', 'LIMIT', 0,
    1000)
  for _, group in ipairs(back) do
    redis.call('ZREM', groups .. 'delayed', group)
    redis.call('ZADD', groups .. 'ring', 'NX', turn, group)
  end
end

-- A task that can never run goes to dead with its reason instead of vanishing or
-- breaking the whole claim: every check below comes before the first write for its id
-- (a script that errors half-way keeps the writes it made).
local tally = {}
local function bury(key, id, job, reason)
  count(tally, job or '', 'd')
  -- (its dedupe key read here, not for every task claimed: a buried task is rare)
  local dedupe = KEYS[10] and redis.pcall('HGET', key, 'dedupe_key')
  free_dedupe(KEYS[10], type(dedupe) == 'string' and dedupe or nil, id, key)
  redis.call('HSET', key, 'id', id, 'state', 'dead', 'finished_at', now, 'last_error',
    'broken task: ' .. reason)
  redis.call('PEXPIRE', key, dead_ttl)
  redis.call('ZADD', KEYS[4], now, id)
  wake(key, KEYS[6] .. id, dead_ttl)
  node_ended(KEYS[5], id, 'dead', nil, 'broken task: ' .. reason, now)
  emit(events_key, id, job, 'dead', 0, now)
  return 'broken task: ' .. reason
end

-- A task whose cancel was requested ends as cancel.lua ends a waiting one (see KEYS[12]);
-- so does one whose expires_at has passed, with reason "expired".
local function cancelled(key, id, job, reason)
  local e = redis.call('HMGET', key, 'dedupe_key', 'periodic')
  free_dedupe(KEYS[10], e[1] or nil, id, key)
  redis.call('HSET', key, 'state', 'dead', 'last_error', reason, 'failed_at', now,
    'finished_at', now)
  redis.call('HDEL', key, 'cancel_requested')  -- (answered: a retry_dead runs it again)
  redis.call('PEXPIRE', key, dead_ttl)
  redis.call('ZADD', KEYS[4], now, id)
  wake(key, KEYS[6] .. id, dead_ttl)
  if KEYS[12] then redis.pcall('ZREM', KEYS[12], id) end
  if e[2] == '1' and job and KEYS[13] then
    redis.pcall('HSET', KEYS[13] .. job, 'last_finished_at', now, 'last_outcome', 'dead')
  end
  node_ended(KEYS[5], id, 'dead', nil, reason, now)
end

-- Admission: how many of the `limit` asked may start now.
local paused = control[1] == '1'
local running, started = 0, 0
if paused then
  limit = 0
elseif limit > 0 then
  if concurrency > 0 then
    running = redis.call('ZCARD', KEYS[2])
    limit = math.max(0, math.min(limit, concurrency - running))
  end
  if rate > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now - rate_ms)
    started = redis.call('ZCARD', KEYS[9])
    limit = math.max(0, math.min(limit, rate - started))
  end
end

-- Whether `group` may start one more task now, counting the `taken` in this claim; one
-- that may not leaves the ring: at its concurrency limit until one of its tasks ends
-- (include/groups.lua's group_ended puts it back), at its rate until its window moves on.
local taken = {}
local take_in_turns  -- (made only for a queue with groups: a claim without pays nothing)
if grouped then
  local function group_may_start(group)
    local more = taken[group] or 0
    if group_concurrency > 0 then
      -- (pcall: a running key of another type counts as none running, so that no task
      -- popped earlier in this claim is left in no set; reclaim.lua's heal leaves it be)
      local said = redis.pcall('HGET', groups .. 'running', group)
      local running_now = type(said) == 'string' and tonumber(said) or 0
      if running_now + more >= group_concurrency then
        redis.call('ZREM', groups .. 'ring', group)
        return false
      end
    end
    if group_rate > 0 then
      local window = groups .. 's:' .. group
      -- (pcall: a window key of another type counts as no start in the window)
      redis.pcall('ZREMRANGEBYSCORE', window, '-inf', now - group_rate_ms)
      local started = redis.pcall('ZCARD', window)
      if type(started) ~= 'number' then started = 0 end
      if started + more >= group_rate then
        local oldest = redis.pcall('ZRANGE', window, 0, 0, 'WITHSCORES')
        local allowed = oldest[2] and tonumber(oldest[2]) + group_rate_ms or now + group_rate_ms
        redis.call('ZREM', groups .. 'ring', group)
        redis.call('ZADD', groups .. 'delayed', allowed, group)
        return false
      end
    end
    return true
  end

  -- Up to `want` ready tasks, as id, group (false: none), id, group, ...: the group first
  -- in the ring gives one and goes to the back, the tasks without a group taking the turn
  -- ''. At most want + 100 turns are looked at (each held-back group leaves the ring as it
  -- is seen).
  take_in_turns = function(want)
    local out = {}
    local ring = groups .. 'ring'
    if redis.call('EXISTS', KEYS[1]) == 1 then
      redis.call('ZADD', ring, 'NX', turn, '')
    end
    local looked = 0
    while #out < 2 * want and looked < want + 100 do
      looked = looked + 1
      local head = redis.call('ZRANGE', ring, 0, 0)[1]
      if not head then break end
      local set = KEYS[1]
      if head ~= '' then set = groups .. 'g:' .. head end
      if head == '' or group_may_start(head) then
        local popped = redis.call('ZPOPMIN', set)
        if popped[1] then
          if head ~= '' then
            redis.call('ZREM', groups .. 'ready', popped[1])
            taken[head] = (taken[head] or 0) + 1
          end
          out[#out + 1] = popped[1]
        out[#out + 1] = head ~= '' and head
        end
        if popped[1] and redis.call('EXISTS', set) == 1 then
          turn = turn + 1
          redis.call('ZADD', ring, turn, head)
        else
          redis.call('ZREM', ring, head)
        end
      end
    end
    return out
  end
end

local reply = {t[1] * 1000000 + t[2], -1}
-- A task buried here, named in the reply when ARGV[12] asks (its last_error: `reason`).
local say_dead = ARGV[12] == '1'
local function said_dead(id, job, reason)
  if say_dead then reply[#reply + 1] = {id, job or '', reason} end
end
if limit > 0 then
  local picked
  local ring = grouped and redis.call('ZRANGE', groups .. 'ring', 0, 1)
  if ring and ring[1] == '' and not ring[2] then
    -- (only the turn of the tasks without a group is left: no ring, one ZPOPMIN again)
    redis.call('DEL', groups .. 'ring')
    ring = nil
  end
  -- picked: id, group, id, group, ... (taken in turns), or ZPOPMIN's id, score, ... (no
  -- group: no table made per task)
  local in_turns = ring and ring[1]
  if in_turns then
    picked = take_in_turns(limit)
  else
    picked = redis.call('ZPOPMIN', KEYS[1], limit)
  end
  local leases = {}  -- score, id pairs for one ZADD to pending
  local deadline = now + lease  -- (the leases' end, written out once: include/numbers.lua)
  if NUMBERS_AS_TEXT then deadline = string.format('%d', deadline) end
  local starts = {}  -- score, member pairs for the rate limit's window
  local buried_in = {}  -- groups whose pick was buried: it counted in `taken`, not in running
  for i = 1, #picked, 2 do
    local id, group = picked[i], in_turns and picked[i + 1]
    local key = KEYS[5] .. id
    if group then buried_in[group] = true end  -- (undone below when the task starts)
    local f = redis.pcall('HMGET', key, 'type', 'params', 'retry_count', 'max_retries',
      'enqueue_time', 'attempt', 'trace', 'cancel_requested', 'run', 'expires_at', 'headers')
    if f['err'] then
      -- The key holds another type. Not ours to delete: the value is kept beside the
      -- record, in the same slot.
      local kind = redis.call('TYPE', key)['ok']
      redis.call('RENAME', key, key .. ':wrongtype')
      said_dead(id, nil, bury(key, id, nil, 'task key held a ' .. kind .. ', kept at '
        .. key .. ':wrongtype'))
    elseif f[1] == false and f[2] == false and f[6] == false then
      said_dead(id, f[1], bury(key, id, f[1],
        'no task hash for this id (or one without type, params and attempt)'))
    elseif f[6] and (not string.match(f[6], '^%d+$') or #f[6] > 9) then
      said_dead(id, f[1], bury(key, id, f[1], 'attempt is not a whole number'))
    elseif f[8] and KEYS[12] then
      cancelled(key, id, f[1], f[8])
      emit(events_key, id, f[1], 'dead', f[6], now)
      said_dead(id, f[1], f[8])
    elseif f[10] and (whole(f[10], 0, MOST) or now + 1) <= now then
      count(tally, f[1] or '', 'd')
      cancelled(key, id, f[1], 'expired')
      emit(events_key, id, f[1], 'dead', f[6], now)
      said_dead(id, f[1], 'expired')
    else
      local attempt = tonumber(f[6] or '0') + 1
      if group then
        buried_in[group] = nil
        redis.call('HSET', key, 'attempt', attempt, 'state', 'pending', 'started_at', now,
          'group_held', '1', 'on_end', '1')
        -- (a count that is not a whole number starts again at this task: the heal in
        -- reclaim.lua recounts it; pcall, so that it cannot stop the claim half-way)
        if type(redis.pcall('HINCRBY', groups .. 'running', group, 1)) ~= 'number' then
          redis.pcall('HSET', groups .. 'running', group, 1)
        end
        if group_rate > 0 then
          redis.pcall('ZADD', groups .. 's:' .. group, now, id .. ':' .. attempt)
          redis.pcall('PEXPIRE', groups .. 's:' .. group, group_rate_ms)
        end
      else
        redis.call('HSET', key, 'attempt', NUMBERS_AS_TEXT and string.format('%d', attempt)
          or attempt, 'state', 'pending', 'started_at', now_arg)
      end
      emit(events_key, id, f[1], 'started', attempt, now)
      leases[#leases + 1] = deadline
      leases[#leases + 1] = id
      if rate > 0 then
        starts[#starts + 1] = now_arg
        starts[#starts + 1] = id .. ':' .. attempt
      end
      local row = {id, attempt, f[1] or '', f[2] or '', f[3] or '0', f[4] or '',
        f[5] or '', f[7] or '', f[9] or ''}
      if f[11] then row[10] = f[11] end  -- (headers: sent only when the task has them)
      reply[#reply + 1] = row
    end
  end
  for i = 1, #leases, 1000 do  -- unpack in slices: Lua's C stack is bounded
    redis.call('ZADD', KEYS[2], unpack(leases, i, math.min(i + 999, #leases)))
  end
  for i = 1, #starts, 1000 do
    redis.call('ZADD', KEYS[9], unpack(starts, i, math.min(i + 999, #starts)))
  end
  if #starts > 0 then
    redis.call('PEXPIRE', KEYS[9], rate_ms)
  end
  -- A group held back in this claim by a pick that was then buried has nothing running
  -- to put it back: it takes its turn again now.
  for group in pairs(buried_in) do
    if redis.call('EXISTS', groups .. 'g:' .. group) == 1 then
      redis.call('ZADD', groups .. 'ring', 'NX', turn, group)
    end
  end
  write_counts(KEYS[7], now, tally)
  running = running + #leases / 2
  started = started + #starts / 2
end

local nxt = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if nxt[2] then
  reply[2] = tonumber(nxt[2])
end
if grouped then  -- a group held back by its rate: when it may start again
  local first = redis.call('ZRANGE', groups .. 'delayed', 0, 0, 'WITHSCORES')
  if first[2] and (reply[2] < 0 or tonumber(first[2]) < reply[2]) then
    reply[2] = tonumber(first[2])
  end
end
-- A limit reached with ready tasks left: the concurrency limit marks the queue blocked
-- (the script that frees a slot wakes a runner), the rate limit says when the oldest
-- start leaves the window. A paused queue says nothing: resuming wakes the runners.
if not paused and ((concurrency > 0 and running >= concurrency)
    or (rate > 0 and started >= rate)) and (redis.call('ZCARD', KEYS[1]) > 0
    or (groups and redis.call('ZCARD', groups .. 'ready') > 0)) then
  if concurrency > 0 and running >= concurrency and KEYS[8] then
    redis.pcall('HSET', KEYS[8], 'blocked', '1')
  end
  if rate > 0 and started >= rate then
    local oldest = redis.call('ZRANGE', KEYS[9], 0, 0, 'WITHSCORES')
    if oldest[2] then
      local allowed = tonumber(oldest[2]) + rate_ms
      if reply[2] < 0 or allowed < reply[2] then reply[2] = allowed end
      if ARGV[11] == '1' then
        reply[#reply + 1] = allowed
      end
    end
  end
end
return reply
