#!lua
-- reclaim: pending tasks whose lease has expired stalled: their runner was lost, or never
-- got the task (a claim's reply lost on the way), or could not renew the lease for that
-- long. A stall is not a failed attempt: the task may never have run. It counts in the
-- task's own `stalls` field, apart from retry_count and max_retries, and the task runs
-- again; the stall past max_stalls (ARGV[5]) sends it to dead ("lease expired (runner
-- lost): stall N, past max_stalls (M)"), so a task that kills its runner every time
-- still ends. The back-off follows the stalls: 2 s x (n-1)^2, so 0, 2, 8 s: the first
-- re-run after a crash starts at once, within lease + reclaim interval, and a task that
-- keeps killing its runner still backs off. The lost runner's late report is refused,
-- because the task is no longer pending under its attempt. A periodic task is never run
-- twice for a slot: a lost one goes to dead. A workflow node (its hash has `run`) that
-- goes to dead also gets its outbox entry: include/workflow.lua.
--
-- KEYS[1] pending zset
-- KEYS[2] scheduled zset
-- KEYS[3] dead zset
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:
-- KEYS[5] waiting zset
-- KEYS[6] signal list
-- KEYS[7] periodic record prefix <prefix>:{<queue>}:periodic:   (as in fail)
-- KEYS[8] done list prefix <prefix>:{<queue>}:done:   (producers waiting for the end of a
--         task that goes to dead are woken through <prefix><id>: see wait.lua)
-- KEYS[9] counters prefix <prefix>:{<queue>}:stats:   (each lost attempt counts as
--         failed, <type>|f, when the task runs again, dead, <type>|d, when not, without a
--         run time: no runner reported its end; in the minute bucket, as in complete)
-- KEYS[10] control hash <prefix>:{<queue>}:control   optional: a freed slot under the
--         queue's concurrency limit wakes a runner through KEYS[6], as in complete)
-- KEYS[11] dedupe hash <prefix>:{<queue>}:dedupe   optional: a task that goes to dead
--         frees its dedupe key there (include/dedupe.lua)
-- KEYS[12] groups prefix <prefix>:{<queue>}:groups:   optional: a task that ran as one of
--         its group's frees its place there (as in complete), and one that runs again at
--         once waits in its group's ready set
-- KEYS[13] cancels zset <prefix>:{<queue>}:cancels   optional: a task leaves it. A task
--         whose hash has cancel_requested (cancel.lua) goes to dead with that as its
--         last_error, never to a retry: its runner is gone before it could end it
-- KEYS[14] events stream <prefix>:{<queue>}:events   optional (with KEYS[10] to KEYS[13]):
--         each stalled task's `failed` event when it runs again, `dead` when not, with
--         the attempt that stalled (include/events.lua)
-- ARGV[1] limit          how many expired tasks to reclaim at most
-- ARGV[2] dead_ttl_ms    dead is trimmed by age (and to dead_max) on every call, not only
--                        when a task dies: an id whose hash expired leaves it within a pass;
--                        >= 1
-- ARGV[3] dead_max       >= 1
-- ARGV[4] heal_ms        optional: at most once per heal_ms per queue (the key
--                        <groups>healed, a string that expires, says when), what admission
--                        trusts is made true again: with KEYS[12], each group's running
--                        count is set to the number of its tasks in pending that claim took
--                        through it (group_held=1), and a group whose count fell takes its
--                        turn again when it has ready tasks; with KEYS[10], a blocked mark
--                        is cleared and one runner woken (it claims, and marks it again if
--                        the limit still holds). A count goes wrong when a task leaves
--                        pending through a script that does not know groups (an older
--                        runner's complete or reclaim), which would hold its group back
--                        for ever. With ARGV[4] the reply is nested (below).
-- ARGV[5] max_stalls     optional: how many stalls a task outlives (default 3; 0: the
--                        first stall sends it to dead)
-- ARGV[6..] pairs        optional: job type, max_stalls of that type's own (a job class
--                        that sets its own bound); a task of another type takes ARGV[5]
-- (each a whole number, at most 2^42 - 1: include/numbers.lua; an error, and nothing
-- written, for another)
-- Returns: {id, outcome, id, outcome, ...} with outcome "waiting", "scheduled" or "dead";
--          with ARGV[4]: {that list, {group, count it said, count now, ...}} (the counts
--          healed, usually none).
--          A task key that holds another type is renamed to <key>:wrongtype and its id
--          goes to dead as a broken task (as in claim). A task that runs again goes back
--          to waiting (or scheduled) at its priority (include/priority.lua).

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

-- >>> include/dead.lua
-- The task's hash says dead with its reason, expires after ttl ms, and its id is in the
-- dead zset with score now; producers waiting for its end are woken through done_key. A
-- task whose retries were counted passes them to store too.
local function to_dead(task_key, dead_key, done_key, id, reason, now, ttl, retry_count)
  if retry_count then
    redis.call('HSET', task_key, 'state', 'dead', 'retry_count', retry_count,
      'last_error', reason, 'failed_at', now, 'finished_at', now)
  else
    redis.call('HSET', task_key, 'state', 'dead', 'last_error', reason, 'failed_at', now,
      'finished_at', now)
  end
  redis.call('PEXPIRE', task_key, ttl)
  redis.call('ZADD', dead_key, now, id)
  wake(task_key, done_key, ttl)
end

-- dead keeps ids younger than ttl ms, and at most dead_max of them (the oldest go first).
local function trim_dead(dead_key, now, ttl, dead_max)
  redis.call('ZREMRANGEBYSCORE', dead_key, '-inf', now - ttl)
  redis.call('ZREMRANGEBYRANK', dead_key, 0, -(dead_max + 1))
end
-- <<< include/dead.lua

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
-- (every number checked before any write: include/numbers.lua)
local limit = argv_whole('reclaim', 1, 'limit', 0, MOST)
local ttl = argv_whole('reclaim', 2, 'dead_ttl_ms', 1, MOST)
local dead_max = argv_whole('reclaim', 3, 'dead_max', 1, MOST)
local max_stalls = argv_whole('reclaim', 5, 'max_stalls', 0, MOST, 3)
local own = {}  -- job type -> its own max_stalls
for i = 6, #ARGV, 2 do
  own[ARGV[i]] = argv_whole('reclaim', i + 1, 'max_stalls of ' .. ARGV[i], 0, MOST)
end
if not KEYS[9] then
  return redis.error_reply('ERR reclaim takes 9 keys: the counters prefix is KEYS[9]')
end
local heal_ms = argv_whole('reclaim', 4, 'heal_ms', 0, MOST, false)
local reason = 'lease expired (runner lost)'
local out = {}
local woken = false
local tally = {}
local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
-- Every read first (pcall: a key of another type is an answer, not an error), so no
-- write below can fail and leave an id in no set.
local found = {}
for i, id in ipairs(ids) do
  found[i] = redis.pcall('HMGET', KEYS[4] .. id, 'retry_count', 'max_retries', 'periodic',
    'type', 'priority', 'dedupe_key', 'group', 'group_held', 'cancel_requested', 'stalls')
end
for i, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local key = KEYS[4] .. id
  local f = found[i]
  local stalls = 1
  local why = reason
  local ends = true  -- (goes to dead: broken, cancelled, periodic, or past max_stalls)
  if f['err'] then
    -- Not ours to delete: kept beside the record, in the same slot (as claim does).
    local kind = redis.call('TYPE', key)['ok']
    redis.call('RENAME', key, key .. ':wrongtype')
    why = 'broken task: task key held a ' .. kind .. ', kept at ' .. key .. ':wrongtype'
    f = {}
  else
    -- (a stalls count that is not a whole number in 0 .. MOST counts as 0)
    stalls = (whole(f[10], 0, MOST - 1) or 0) + 1
    if f[9] then
      why = f[9]
    elseif f[3] ~= '1' and stalls > (own[f[4] or ''] or max_stalls) then
      why = reason .. ': stall ' .. stalls .. ', past max_stalls ('
        .. (own[f[4] or ''] or max_stalls) .. ')'
    elseif f[3] ~= '1' then
      ends = false
    end
  end
  if f[8] == '1' then
    group_ended(KEYS[12], key, f[7], KEYS[6], t[1] * 1000000 + t[2])
  end
  local outcome
  if not ends then
    -- (at most the latest ready time a score holds: include/priority.lua)
    local due = math.min(now + 2000 * (stalls - 1) * (stalls - 1), MOST)
    redis.call('HSET', key, 'stalls', stalls, 'stalled_at', now, 'due_at', due)
    if due <= now then
      outcome = 'waiting'
      make_ready(KEYS[5], KEYS[12], id, waiting_score(due, f[5]), f[7], t[1] * 1000000 + t[2])
      woken = true
    else
      outcome = 'scheduled'
      redis.call('ZADD', KEYS[2], due, id)
    end
    redis.call('HSET', key, 'state', outcome)
    count(tally, f[4] or '', 'f')
    if events_key then
      emit(events_key, id, f[4], 'failed', redis.call('HGET', key, 'attempt'), now)
    end
  else
    outcome = 'dead'
    count(tally, f[4] or '', 'd')
    if f[4] then  -- (the stall that ends it is counted too; a broken task has no record)
      redis.call('HSET', key, 'stalls', stalls)
    end
    to_dead(key, KEYS[3], KEYS[8] .. id, id, why, now, ttl)
    if f[9] then  -- (the request is answered: a retry_dead of the task runs it again)
      redis.call('HDEL', key, 'cancel_requested')
      if KEYS[13] then  -- (pcall: a key of another type must not stop the reclaim)
        redis.pcall('ZREM', KEYS[13], id)
      end
    end
    free_dedupe(KEYS[11], f[6], id, key)
    if f[3] == '1' then
      -- (pcall: a record key holding another type must not stop the reclaim of the others)
      redis.pcall('HSET', KEYS[7] .. f[4], 'last_finished_at', now, 'last_outcome', 'dead')
    end
    node_ended(KEYS[4], id, 'dead', nil, why, now)
    if events_key then  -- (a broken task's key was renamed: attempt 0)
      emit(events_key, id, f[4], 'dead', redis.call('HGET', key, 'attempt'), now)
    end
  end
  out[#out + 1] = id
  out[#out + 1] = outcome
end
if woken and redis.call('LLEN', KEYS[6]) == 0 then
  redis.call('RPUSH', KEYS[6], '1')
end
if #out > 0 then
  unblock(KEYS[10], KEYS[6])
  write_counts(KEYS[9], now, tally)
end
trim_dead(KEYS[3], now, ttl, dead_max)  -- (on every pass: a timer, not only a death)
if not heal_ms then
  return out
end
local healed = {}
local groups = KEYS[12]
if heal_ms > 0 and groups
    and redis.call('SET', groups .. 'healed', now, 'PX', heal_ms, 'NX') then
  unblock(KEYS[10], KEYS[6])
  local running = groups .. 'running'
  local counted = {}
  if redis.call('EXISTS', running, groups .. 'ready') > 0 then
    counted = redis.pcall('HGETALL', running)
  end
  -- (a running key of another type: not ours to mend)
  if not counted['err'] and (#counted > 0 or redis.call('EXISTS', groups .. 'ready') == 1) then
    -- Every read first: the tasks in pending that claim took through their group.
    local held = {}
    for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      local g = redis.pcall('HMGET', KEYS[4] .. id, 'group', 'group_held')
      if not g['err'] and g[2] == '1' and g[1] and g[1] ~= '' then
        held[g[1]] = (held[g[1]] or 0) + 1
      end
    end
    local said = {}
    for i = 1, #counted, 2 do
      said[counted[i]] = counted[i + 1]
    end
    for group, n in pairs(held) do
      if said[group] ~= tostring(n) then
        redis.call('HSET', running, group, n)
        healed[#healed + 1] = group
        healed[#healed + 1] = tonumber(said[group]) or 0
        healed[#healed + 1] = n
      end
    end
    local turn = t[1] * 1000000 + t[2]
    for group, n in pairs(said) do
      if not held[group] then
        redis.call('HDEL', running, group)
        healed[#healed + 1] = group
        healed[#healed + 1] = tonumber(n) or 0
        healed[#healed + 1] = 0
      end
      -- (a group whose count fell may start again: back in turn, as group_ended puts it)
      if (held[group] or 0) < (tonumber(n) or 0)
          and redis.call('EXISTS', groups .. 'g:' .. group) == 1
          and redis.call('ZADD', groups .. 'ring', 'NX', turn, group) == 1
          and redis.call('LLEN', KEYS[6]) == 0 then
        redis.call('RPUSH', KEYS[6], '1')
      end
    end
  end
end
return {out, healed}
