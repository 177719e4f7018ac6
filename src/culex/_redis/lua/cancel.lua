#!lua
-- cancel: call off a task. A task that has not started goes to dead as a task that failed
-- for good does (there is no state of its own), so a producer waiting for its result is
-- told it died, `culex dead` lists it and retry_dead can put it back. A running (pending)
-- task is left to its runner, which holds it under a lease: with KEYS[9] to KEYS[11] the
-- cancel is requested, and the runner, which reads the requests about once a second,
-- stops the attempt and reports it with fail, which sends a task whose cancel was
-- requested to dead with that reason, never to a retry (as reclaim does when its runner
-- is gone). Without them a running task is refused, as before running tasks could be
-- cancelled. A workflow node waiting for its upstreams (state `blocked`: in no set) is
-- called off as a waiting task is, and waits for nothing any more (its waits:<id> set
-- goes). A workflow node (its hash has `run`) that goes to dead also gets its outbox
-- entry: include/workflow.lua (the task prefix is KEYS[1] without the id).
--
-- KEYS[1] task hash
-- KEYS[2] waiting zset
-- KEYS[3] scheduled zset
-- KEYS[4] dead zset
-- KEYS[5] periodic record prefix <prefix>:{<queue>}:periodic:   (a task of a periodic job
--         that is cancelled writes last_finished_at and last_outcome there, as in fail)
-- KEYS[6] done list <prefix>:{<queue>}:done:<id>   (producers waiting for the task's end
--         are woken through it: see wait.lua)
--         (cancel writes no counter: a cancelled task never ran, and a running one is
--         counted once, as dead, by the script that ends it; see include/stats.lua)
-- KEYS[7] dedupe hash <prefix>:{<queue>}:dedupe   optional: the cancelled task frees its
--         dedupe key there (include/dedupe.lua)
-- KEYS[8] groups prefix <prefix>:{<queue>}:groups:   optional: a waiting task of a group
--         is taken out of its group's ready set (include/groups.lua)
-- KEYS[9] pending zset   optional, with KEYS[10] and KEYS[11]: a running task's cancel is
--         requested; without them a running task is refused
-- KEYS[10] cancels zset <prefix>:{<queue>}:cancels   optional: the running tasks whose
--         cancel was requested, scored by the request's time (ms); fail, complete and
--         reclaim remove an id when its task leaves pending. Up to 10 of its oldest ids
--         whose task is no longer pending under a request (ended by a client that sent
--         those scripts no cancels key) leave it on each new request, so the set ends.
-- KEYS[11] task key prefix <prefix>:{<queue>}:task:   optional: to read those oldest ids'
--         tasks
-- KEYS[12] events stream <prefix>:{<queue>}:events   optional (with KEYS[9] to KEYS[11]):
--         a task cancelled gets its `dead` event, with its last attempt (0: it never
--         ran); a requested cancel gets none: the script that ends the task writes it
--         (include/events.lua)
-- ARGV[1] id
-- ARGV[2] reason          free text, or "": last_error becomes "cancelled: <reason>" or
--                         "cancelled"
-- ARGV[3] dead_ttl_ms     failed_job_ttl in ms: the hash expires, and dead is trimmed by age
-- ARGV[4] dead_max        dead keeps at most this many ids (the oldest go first), >= 1
--                         (both whole numbers, at most 2^42 - 1: include/numbers.lua)
-- ARGV[5] waiting_only    optional: "1": a running task is refused even with KEYS[9] to
--                         KEYS[11] (sent with KEYS[12] by a bulk cancel, which calls off
--                         only what has not started)
-- Returns: "cancelled" when the hash said state "waiting" or "scheduled" and the id was in
--          that set, or state "blocked" (a workflow node: in no set, its waits:<id> set is
--          deleted): it left the set, its hash says state "dead" with last_error, failed_at
--          and finished_at = now (retry_count and attempt are kept), the hash expires after
--          dead_ttl_ms, and the id is in dead with score now (dead is trimmed as in fail).
--          "cancelling" (with KEYS[9] to KEYS[11]) when the hash said "pending" and the id
--          was in pending: the hash gets cancel_requested = the last_error it will end
--          with, and the id is in the cancels zset with score now; the task stays pending
--          until its runner (or reclaim) ends it. A second cancel of it changes nothing and
--          says "cancelling" again (the first reason stands).
--          Otherwise nothing changes and the reply is the state the hash holds ("pending",
--          "succeeded", "dead"; "waiting" or "scheduled" only if the id is missing from that
--          set, which no culex script leaves), or "" when there is no task hash (never
--          enqueued, expired, or the key holds another type).

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

-- The sorted set that lists a ready task of `group` for counts and listings.
local function ready_set(waiting, groups, group)
  if groups and group and group ~= '' then
    return groups .. 'ready'
  end
  return waiting
end

-- Take ready task `id` out of where it waits (cancel, delete): the set ready_set names,
-- and its group's own set.
local function unready(waiting, groups, id, group)
  redis.call('ZREM', ready_set(waiting, groups, group), id)
  if groups and group and group ~= '' then
    redis.call('ZREM', groups .. 'g:' .. group, id)
  end
end

-- (left out here, not called by this script: make_ready, group_ended)
-- <<< include/groups.lua

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

-- The task prefix <prefix>:{<queue>}:task: of task_key, a script's KEY for one task's hash
-- (<prefix>:{<queue>}:task:<id>); nil when the key does not end in task:<id>.
local function task_prefix_of(task_key, id)
  local prefix = string.sub(task_key, 1, #task_key - #id)
  if string.sub(task_key, #prefix + 1) ~= id or string.sub(prefix, -5) ~= 'task:' then
    return nil
  end
  return prefix
end

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

-- A blocked node that ends without running (cancel, delete) waits for nothing any more:
-- its <base>waits:<id> set goes. Its <base>upstream:<id> hash stays: the node's own outbox
-- entry, once applied, lets it expire.
local function node_forget(task_prefix, id)
  local base = task_prefix and string.match(task_prefix, '^(.*)task:$')
  if base then
    redis.call('DEL', base .. 'waits:' .. id)
  end
end
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

local events_key = KEYS[12]
-- (checked before any write: include/numbers.lua)
local ttl = argv_whole('cancel', 3, 'dead_ttl_ms', 1, MOST)
local dead_max = argv_whole('cancel', 4, 'dead_max', 1, MOST)
local f = redis.pcall('HMGET', KEYS[1], 'state', 'periodic', 'type', 'dedupe_key', 'group',
  'cancel_requested')
if f['err'] or not f[1] then  -- (a missing field arrives as false: never written back)
  return ''
end
local reason = 'cancelled'
if ARGV[2] ~= '' then
  reason = reason .. ': ' .. ARGV[2]
end
if f[1] == 'pending' and KEYS[11] and ARGV[5] ~= '1' then
  if f[6] then  -- (asked already: the first request and its reason stand)
    return 'cancelling'
  end
  if not redis.call('ZSCORE', KEYS[9], ARGV[1]) then
    return f[1]
  end
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  -- A request whose task ended through a script that was sent no cancels key (a foreign
  -- or older runner) would stay: the oldest few are checked on each new request.
  for _, old in ipairs(redis.call('ZRANGE', KEYS[10], 0, 9)) do
    local g = redis.pcall('HMGET', KEYS[11] .. old, 'state', 'cancel_requested')
    if g['err'] or g[1] ~= 'pending' or not g[2] then
      redis.call('ZREM', KEYS[10], old)
    end
  end
  redis.call('HSET', KEYS[1], 'cancel_requested', reason, 'on_end', '1')
  redis.call('ZADD', KEYS[10], now, ARGV[1])
  return 'cancelling'
end
local set
if f[1] == 'waiting' then
  set = ready_set(KEYS[2], KEYS[8], f[5])
elseif f[1] == 'scheduled' then
  set = KEYS[3]
end
local blocked = f[1] == 'blocked'  -- (a workflow node waiting for its upstreams: no set)
if not blocked and (not set or not redis.call('ZSCORE', set, ARGV[1])) then
  return f[1]
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- The one write that can fail for this id alone (its periodic record's key holds another
-- type) goes first: a script that stops on an error keeps the writes before it.
if f[2] == '1' and f[3] then
  redis.call('HSET', KEYS[5] .. f[3], 'last_finished_at', now, 'last_outcome', 'dead')
end
if f[1] == 'waiting' then
  unready(KEYS[2], KEYS[8], ARGV[1], f[5])
elseif set then
  redis.call('ZREM', set, ARGV[1])
end
to_dead(KEYS[1], KEYS[4], KEYS[6], ARGV[1], reason, now, ttl)
trim_dead(KEYS[4], now, ttl, dead_max)
free_dedupe(KEYS[7], f[4], ARGV[1], KEYS[1])
local prefix = task_prefix_of(KEYS[1], ARGV[1])
if blocked then
  node_forget(prefix, ARGV[1])
end
node_ended(prefix, ARGV[1], 'dead', nil, reason, now)
if events_key then
  emit(events_key, ARGV[1], f[3], 'dead', redis.call('HGET', KEYS[1], 'attempt'), now)
end
return 'cancelled'
