#!lua
-- delete: remove tasks that are not running, for good: each id leaves its state's set and
-- its hash is deleted. A pending task is refused (its runner holds it under a lease and
-- only its report ends it), and so is a succeeded one (its hash expires by itself).
-- Producers waiting for a deleted task's end are woken, and then find no record. A
-- workflow node (its hash has `run`) also gets its outbox entry, as a dead node with the
-- error "deleted" (include/workflow.lua), before its hash goes; a node waiting for its
-- upstreams (state `blocked`: in no set) can be deleted too, and its waits:<id> set goes.
--
-- KEYS[1] waiting zset
-- KEYS[2] scheduled zset
-- KEYS[3] dead zset
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:   (the ids come in ARGV; the prefixes
--         keep every key in the queue's slot)
-- KEYS[5] done list prefix <prefix>:{<queue>}:done:
-- KEYS[6] dedupe hash <prefix>:{<queue>}:dedupe   optional: a deleted task frees its
--         dedupe key there (include/dedupe.lua)
-- KEYS[7] groups prefix <prefix>:{<queue>}:groups:   optional: a waiting task of a group
--         is taken out of its group's ready set (include/groups.lua)
-- KEYS[8] from: the set     optional: the set the ids were read from (KEYS[1], KEYS[2],
--         KEYS[3], or the grouped ready set <groups>ready for waiting): only ids whose hash
--         says that set's state are deleted, so that a walk of one state (bulk.py) never
--         deletes a task of another whose id is also in that set
-- ARGV[1..] ids             the ids to delete
-- Returns: {deleted, skipped}: two arrays of ids. An id is deleted when its hash says state
--          "waiting", "scheduled" or "dead" and the id is in that set, or (without KEYS[8])
--          state "blocked": it leaves the set, the
--          hash is deleted, and when the hash had waited=1 one element is pushed to its done
--          list, which expires after 60 s (see wait.lua). An id in dead whose hash is gone
--          (expired) is removed from dead and counts as deleted. Any other id is skipped and
--          changes nothing (pending, succeeded, unknown, or a key of another type).

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

-- A blocked node that ends without running (cancel, delete) waits for nothing any more:
-- its <base>waits:<id> set goes. Its <base>upstream:<id> hash stays: the node's own outbox
-- entry, once applied, lets it expire.
local function node_forget(task_prefix, id)
  local base = task_prefix and string.match(task_prefix, '^(.*)task:$')
  if base then
    redis.call('DEL', base .. 'waits:' .. id)
  end
end

-- (left out here, not called by this script: task_prefix_of)
-- <<< include/workflow.lua

local sets = {waiting = KEYS[1], scheduled = KEYS[2], dead = KEYS[3]}
local only  -- (KEYS[8]: the one state whose tasks are deleted)
if KEYS[8] then
  for state, key in pairs(sets) do
    if KEYS[8] == key then only = state end
  end
  if KEYS[7] and KEYS[8] == KEYS[7] .. 'ready' then only = 'waiting' end
  if not only then
    return redis.error_reply('ERR delete: KEYS[8] must be the waiting, scheduled, dead or '
      .. 'grouped ready set of the queue')
  end
end
local deleted, skipped = {}, {}
local now  -- (the server's time, read for the first node deleted)
for _, id in ipairs(ARGV) do
  local key = KEYS[4] .. id
  local f = redis.pcall('HMGET', key, 'state', 'waited', 'dedupe_key', 'group', 'run')
  local set = not f['err'] and f[1] and (not only or f[1] == only) and sets[f[1]]
  if set and f[1] == 'waiting' then set = ready_set(KEYS[1], KEYS[7], f[4]) end
  -- (a workflow node waiting for its upstreams is in no set: KEYS[8] never names it)
  local blocked = not f['err'] and f[1] == 'blocked' and not only
  if blocked or (set and redis.call('ZSCORE', set, id)) then
    if f[1] == 'waiting' then
      unready(KEYS[1], KEYS[7], id, f[4])
    elseif set then
      redis.call('ZREM', set, id)
    end
    if f[5] then  -- (a node: its entry first, while its hash can still be read)
      if not now then
        local t = redis.call('TIME')
        now = t[1] * 1000 + math.floor(t[2] / 1000)
      end
      node_ended(KEYS[4], id, 'dead', nil, 'deleted', now)
      node_forget(KEYS[4], id)
    end
    redis.call('DEL', key)
    free_dedupe(KEYS[6], f[3], id)
    if f[2] == '1' then
      redis.call('RPUSH', KEYS[5] .. id, 'done')
      redis.call('PEXPIRE', KEYS[5] .. id, 60000)
    end
    deleted[#deleted + 1] = id
  elseif not f['err'] and not f[1] and (not only or only == 'dead')
      and redis.call('EXISTS', key) == 0 and redis.call('ZSCORE', KEYS[3], id) then
    redis.call('ZREM', KEYS[3], id)
    deleted[#deleted + 1] = id
  else
    skipped[#skipped + 1] = id
  end
end
return {deleted, skipped}
