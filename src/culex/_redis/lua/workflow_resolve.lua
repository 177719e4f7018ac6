#!lua
-- workflow_resolve: apply one upstream's end (or the run's start) to one blocked workflow
-- node, in the node's slot. The node forgets the upstream (a set: applying the same end
-- twice changes nothing), keeps a copy of what it ended with (so the result outlives the
-- upstream's own hash), and then:
--   - ends dead without running, when the upstream ended dead and the node's policy is
--     "dead": its last_error names the upstream, the producers waiting for its end are
--     woken, and its own outbox entry is written (include/workflow.lua), so its
--     downstreams learn of it in turn;
--   - goes to waiting when it waits for no upstream any more (policy "run": whatever the
--     upstreams' ends);
--   - else stays blocked.
-- A node that is not blocked (it ended, runs, or was released already), or that never
-- waited for that upstream (the upstream's `down` names a node that is not its
-- downstream), is left as it is: "ignored"; one that had the same end applied already
-- is left as it is too: "blocked".
--
-- KEYS[1] task key prefix <prefix>:{<queue>}:task:   (the node's hash, and its
--         <prefix>:{<queue>}:waits:<id> and :upstream:<id>)
-- KEYS[2] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[3] signal list    <prefix>:{<queue>}:signal   (wakes an idle runner)
-- KEYS[4] dead zset      <prefix>:{<queue>}:dead
-- KEYS[5] events stream  <prefix>:{<queue>}:events   optional: a node released gets its
--         `enqueued` event, one ended dead by its policy its `dead` event, attempt 0
--         (include/events.lua)
-- ARGV[1] id             the node's task id
-- ARGV[2] upstream       the upstream's task id, or "" for the run's start (applied to
--                        the nodes without upstreams once the run is committed)
-- ARGV[3] name           the upstream's node name
-- ARGV[4] state          how the upstream ended: "succeeded" or "dead"
-- ARGV[5] type           the upstream's job type (for reading its result typed)
-- ARGV[6] result         the upstream's result (JSON text), "" when it died
-- ARGV[7] error          why the upstream died, "" when it succeeded
-- ARGV[8] dead_ttl_ms    how long the node's hash is kept when it ends dead here
-- ARGV[9..] more node ids (optional), of the same queue, to which the same end is applied
--                        as to ARGV[1] (the downstreams of one upstream, in one call)
-- Returns: "waiting" (released), "dead" (ended by its policy), "blocked" (waits for more),
--          "ignored" (not blocked, or not a downstream of that upstream) or "gone" (no
--          such hash); with ARGV[9..], a list of
--          those, one a node, in the order ARGV[1], ARGV[9], ARGV[10], ...
-- An error, and nothing written, for a bad state or dead_ttl_ms.

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

local events_key = KEYS[5]
local up, state = ARGV[2], ARGV[4]
if state ~= 'succeeded' and state ~= 'dead' then
  return redis.error_reply('ERR workflow_resolve: ARGV[4] state is "succeeded" or "dead"')
end
local ttl = argv_whole('workflow_resolve', 8, 'dead_ttl_ms', 1, MOST)
local base = string.sub(KEYS[1], 1, #KEYS[1] - 5)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local copy = nil
if up ~= '' then
  local fields = {name = ARGV[3], state = state, type = ARGV[5]}
  if state == 'succeeded' then fields.result = ARGV[6] else fields.error = ARGV[7] end
  copy = cjson.encode(fields)
end
local signalled = false

local function resolve(id)
  local key = KEYS[1] .. id
  local f = redis.pcall('HMGET', key, 'state', 'policy', 'priority', 'type')
  if f['err'] then return 'ignored' end
  if not f[1] then return 'gone' end
  if f[1] ~= 'blocked' then return 'ignored' end
  local waits = base .. 'waits:' .. id
  if up ~= '' then
    -- (an upstream it does not wait for: an end applied already, still "blocked", or a
    -- `down` that names a node which is not this upstream's downstream, "ignored"; it
    -- changes nothing)
    if redis.call('SREM', waits, up) == 0 then
      return redis.call('HEXISTS', base .. 'upstream:' .. id, up) == 1 and 'blocked'
        or 'ignored'
    end
    redis.call('HSET', base .. 'upstream:' .. id, up, copy)
    if state == 'dead' and f[2] ~= 'run' then
      local reason = 'upstream ' .. ARGV[3] .. ' (' .. up .. ') ended dead'
      if ARGV[7] ~= '' then reason = reason .. ': ' .. string.sub(ARGV[7], 1, 500) end
      redis.call('HSET', key, 'state', 'dead', 'last_error', reason, 'failed_at', now,
        'finished_at', now)
      redis.call('ZADD', KEYS[4], now, id)
      redis.call('PEXPIRE', key, ttl)
      redis.call('DEL', waits)
      wake(key, base .. 'done:' .. id, ttl)
      node_ended(KEYS[1], id, 'dead', nil, reason, now)
      emit(events_key, id, f[4], 'dead', 0, now)
      return 'dead'
    end
  end
  if redis.call('SCARD', waits) > 0 then return 'blocked' end
  redis.call('HSET', key, 'state', 'waiting', 'due_at', now)
  redis.call('ZADD', KEYS[2], waiting_score(now, f[3]), id)
  if not signalled and redis.call('LLEN', KEYS[3]) == 0 then
    redis.call('RPUSH', KEYS[3], '1')
  end
  signalled = true
  emit(events_key, id, f[4], 'enqueued', 0, now)
  return 'waiting'
end

if #ARGV <= 8 then return resolve(ARGV[1]) end
local out = {resolve(ARGV[1])}
for i = 9, #ARGV do
  out[#out + 1] = resolve(ARGV[i])
end
return out
