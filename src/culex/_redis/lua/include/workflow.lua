-- The end of a workflow node, written once: every script that ends a task (complete.lua,
-- fail.lua, reclaim.lua, claim.lua, retry_later.lua, cancel.lua, delete.lua) carries a copy
-- of this file between `-- >>> include/workflow.lua` and `-- <<< include/workflow.lua`.
-- Edit this file, then run `python -m culex._redis.assembly` to refresh the copies. Not a
-- script of its own.

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
