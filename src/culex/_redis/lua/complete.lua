#!lua
-- complete: pending tasks succeeded; store their results and let their hashes expire.
-- One call reports a whole batch of one queue (a runner sends what finished meanwhile).
-- A workflow node (its hash has `run`) also gets its outbox entry: include/workflow.lua.
--
-- KEYS[1] pending zset
-- KEYS[2] task key prefix <prefix>:{<queue>}:task:   (one hash per id below; the prefix
--         keeps every key in the queue's slot)
-- KEYS[3] periodic record prefix <prefix>:{<queue>}:periodic:   (a task of a periodic job,
--         marked periodic=1 in its hash, writes last_finished_at and last_outcome there)
-- KEYS[4] done list prefix <prefix>:{<queue>}:done:   (producers waiting for a task's end
--         are woken through <prefix><id>: see wait.lua)
-- KEYS[5] counters prefix <prefix>:{<queue>}:stats:   (each task that lands counts as
--         succeeded, <type>|s<run-time bucket>, and adds its run time now - started_at
--         to <type>|ms, in the minute bucket <prefix>m:<start> under it: one HINCRBY per
--         field for the whole batch. The first count in a new minute adds the minute that
--         <prefix>total names to its hour bucket <prefix>h:<start> and to <prefix>total,
--         and names its own: include/stats.lua)
-- KEYS[6] control hash <prefix>:{<queue>}:control   optional, with KEYS[7]: when a
--         claim marked the queue blocked by its concurrency limit, a runner is woken
--         through KEYS[7] (include/unblock.lua)
-- KEYS[7] signal list <prefix>:{<queue>}:signal   optional, with KEYS[6]
-- KEYS[8] dedupe hash <prefix>:{<queue>}:dedupe   optional: a task that has a dedupe key
--         frees it there (include/dedupe.lua); a task without one costs nothing more
-- KEYS[9] groups prefix <prefix>:{<queue>}:groups:   optional: a task that ran as one of
--         its group's (group_held=1) frees its place, and the group takes its turn again
--         when it has more ready (include/groups.lua)
-- KEYS[10] cancels zset <prefix>:{<queue>}:cancels   optional: a task whose cancel was
--         requested leaves it. Its success stands: it ended before its runner learned of
--         the request, and the work is done; see cancel.lua
-- KEYS[11] succeeded zset <prefix>:{<queue>}:succeeded   optional: the recent successes,
--         scored by their end (ms): each task that lands is added; the set keeps the
--         newest 1,000 (SUCCEEDED_KEPT); an id whose hash has expired stays until newer
--         ones push it out (readers list it with its id and end alone: browse.lua's
--         state). The set expires SUCCEEDED_AGE_MS (a day) after the last success, or
--         after the hashes it names when they are kept longer: when less than half of
--         keep = max(SUCCEEDED_AGE_MS, twice the longest ttl_ms of the call) is left of
--         its TTL, the TTL becomes keep
-- KEYS[12] events stream <prefix>:{<queue>}:events   optional (with KEYS[6] to KEYS[11]):
--         each task that lands gets its `succeeded` event (include/events.lua)
-- ARGV[1..] quadruples: id, attempt, result, ttl_ms
--         attempt  the one the runner was handed: it fences stale runners
--         result   JSON text of perform's return value
--         ttl_ms   how long the succeeded hash (and its result) is kept, a whole number of
--                  ms >= 1: culex sends result_ttl for a value, successful_job_ttl for null
-- Returns: the reports refused, as id, attempt, id, attempt, ... (not pending under that
--          attempt: the lease was lost and the task handed out again, or it is gone, or
--          its key holds another type); {} when all landed. The attempt says which report:
--          a batch may hold two attempts of one task, the first refused, the second landed.
--          An error, and nothing written, when ARGV is not quadruples or a ttl_ms is not a
--          whole number in 1 .. 2^42 - 1.

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

-- (left out here, not called by this script: ready_set, make_ready, unready)
-- <<< include/groups.lua

-- >>> include/stats.lua
-- Counters of a queue, per job type: <job>|<o><b> counts the attempts that ended with
-- outcome <o> (s succeeded, f failed, d dead) and a run time in bucket <b> (0 .. 13: up to
-- 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30, 60, 300 s; 14: above), <job>|<o>
-- those with no run time known; <job>|ms sums the run times. A script adds what one call
-- ended to a Lua table with count(), then writes it once with write_counts(): one HINCRBY
-- per field and hash, however many tasks, and none for a sum that stayed 0.
-- An attempt's run time in ms from its hash's started_at (set by claim), or nil when that
-- is missing or not a time; 0 when the server's clock went back.
local function run_time(now_ms, started_at)
  local s = tonumber(started_at)
  if not s or s ~= s or s < 0 or s > 1e15 then return nil end
  return math.max(0, now_ms - math.floor(s))
end

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

-- The succeeded zset, when the caller sends it (an older runner does not), and how many ids
-- it keeps: the newest, so the history of a busy queue is its last 1,000 successes.
local succeeded = KEYS[11]
local SUCCEEDED_KEPT = 1000
local SUCCEEDED_AGE_MS = 86400000

if not KEYS[5] then  -- (before any write, as every check)
  return redis.error_reply('ERR complete takes 5 keys: the counters prefix is KEYS[5]')
end
if #ARGV % 4 ~= 0 then
  return redis.error_reply('ERR complete takes quadruples: id, attempt, result, ttl_ms')
end
for i = 4, #ARGV, 4 do
  argv_whole('complete', i, 'ttl_ms', 1, MOST)
end
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

local events_key = KEYS[12]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- (what the commands get for now: the number, or its text: include/numbers.lua)
local now_arg = NUMBERS_AS_TEXT and t[1] .. string.sub('000' .. string.sub(t[2], 1, -4), -3)
  or now
local refused = {}
local done = {}
local tally = {}
local longest = 0  -- (the longest ttl_ms of the tasks that landed: the history's TTL)
for i = 1, #ARGV, 4 do
  local id = ARGV[i]
  local key = KEYS[2] .. id
  -- (pcall: a key of another type is refused like a stale report; an error here would
  -- stop the batch after the writes of the ids before it)
  local f = redis.pcall('HMGET', key, 'attempt', 'state', 'periodic', 'type', 'waited',
    'started_at', 'on_end')
  if not f['err'] and f[1] == ARGV[i + 1] and f[2] == 'pending' then
    -- on_end=1: the task has a dedupe key, a place among its group's running tasks, a
    -- cancel request, or a workflow run (a node), to clear or tell as it ends (read only
    -- then: a field a task lacks costs a scan of its hash)
    local e = {}
    if f[7] then
      e = redis.call('HMGET', key, 'dedupe_key', 'group', 'group_held', 'cancel_requested',
        'run')
    end
    local ttl = tonumber(ARGV[i + 3])
    longest = math.max(longest, ttl)
    done[#done + 1] = id
    count(tally, f[4] or '', 's', run_time(now, f[6]))
    redis.call('HSET', key, 'state', 'succeeded', 'result', ARGV[i + 2], 'finished_at',
      now_arg)
    redis.call('PEXPIRE', key, ttl)
    if f[5] then  -- (read above: most tasks have no waiter, and cost no HDEL)
      wake(key, KEYS[4] .. id, ttl)
    end
    if e[1] then
      free_dedupe(KEYS[8], e[1], id, key)
    end
    if e[3] == '1' then
      group_ended(KEYS[9], key, e[2], KEYS[7], t[1] * 1000000 + t[2])
    end
    if e[4] and KEYS[10] then
      redis.pcall('ZREM', KEYS[10], id)
    end
    if f[3] == '1' then
      -- (pcall: a record key holding another type must not stop the tasks' own reports)
      redis.pcall('HSET', KEYS[3] .. f[4], 'last_finished_at', now, 'last_outcome', 'succeeded')
    end
    if e[5] then  -- (a node: its outbox entry, include/workflow.lua)
      node_ended(KEYS[2], id, 'succeeded', ARGV[i + 2], nil, now)
    end
    emit(events_key, id, f[4], 'succeeded', f[1], now)
  else
    refused[#refused + 1] = id
    refused[#refused + 1] = ARGV[i + 1]
  end
end
for i = 1, #done, 1000 do  -- unpack in slices: Lua's C stack is bounded
  redis.call('ZREM', KEYS[1], unpack(done, i, math.min(i + 999, #done)))
end
if succeeded and #done > 0 then
  -- (pcall: a key of another type must not undo the reports; the history is a convenience)
  local scored = {}
  for _, id in ipairs(done) do
    scored[#scored + 1] = now_arg
    scored[#scored + 1] = id
  end
  for i = 1, #scored, 1000 do
    redis.pcall('ZADD', succeeded, unpack(scored, i, math.min(i + 999, #scored)))
  end
  redis.pcall('ZREMRANGEBYRANK', succeeded, 0, -SUCCEEDED_KEPT - 1)
  -- (raised to keep once less than half of it is left: not a write every call; a day at
  -- least, so that successes whose hashes expired at once, a None result's, stay listed)
  local keep = math.max(SUCCEEDED_AGE_MS, 2 * longest)
  local left = redis.pcall('PTTL', succeeded)
  if type(left) == 'number' and left < keep / 2 then
    redis.pcall('PEXPIRE', succeeded, keep)
  end
  -- (no look at whether the hashes named are still there: that cost a read and a removal
  -- a task on the hot path. A reader skips the ids whose hash has expired, and the count
  -- keeps the set small however many there are)
end
write_counts(KEYS[5], now, tally)
if #done > 0 then
  unblock(KEYS[6], KEYS[7])
end
return refused
