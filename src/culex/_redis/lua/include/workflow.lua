-- Workflow nodes' ends, written once: every script that ends a task carries a copy of this
-- file between `-- >>> include/workflow.lua` and `-- <<< include/workflow.lua`. Edit this
-- file, then run `python -m culex._redis.assembly` to refresh the copies.

-- A workflow node is a task whose hash has `run` (its run's id), `node` (its name) and
-- `down` (a JSON list of its downstreams, [[queue, id], ...]). The script that ends a node
-- (succeeded, or dead for any reason) writes, in the same call and slot, its outbox entry:
-- the id in <prefix>:{<queue>}:outbox, scored by now (when a runner may take it), and the
-- hash <prefix>:{<queue>}:outbox:<id>: run, node, down, state (succeeded or dead), result
-- (succeeded) or error (dead), at (now, ms). Runners apply it to the downstreams and the
-- run (culex.workflows.release). task_prefix is <prefix>:{<queue>}:task:, whose queue's
-- other keys are named from it. True when the task is a node.
local function node_ended(task_prefix, id, state, result, err, now)
  local f = redis.call('HMGET', task_prefix .. id, 'run', 'node', 'down')
  if not f[1] then return false end
  local base = string.sub(task_prefix, 1, #task_prefix - 5)
  local entry = base .. 'outbox:' .. id
  redis.call('DEL', entry)
  redis.call('HSET', entry, 'run', f[1], 'node', f[2] or id, 'down', f[3] or '[]',
    'state', state, 'at', now)
  if state == 'succeeded' then
    redis.call('HSET', entry, 'result', result or 'null')
  else
    redis.call('HSET', entry, 'error', err or '')
  end
  redis.call('ZADD', base .. 'outbox', now, id)
  return true
end

-- A blocked node that ends without running (cancelled, deleted) no longer waits.
local function node_forget(task_prefix, id)
  redis.call('DEL', string.sub(task_prefix, 1, #task_prefix - 5) .. 'waits:' .. id)
end
