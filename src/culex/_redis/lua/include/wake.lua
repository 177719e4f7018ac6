-- Waking the producers that wait for a task's end, written once: complete.lua, claim.lua,
-- fail.lua, reclaim.lua and cancel.lua each carry a copy of this file between
-- `-- >>> include/wake.lua` and `-- <<< include/wake.lua` (in the last three before the
-- copy of include/dead.lua, whose to_dead calls it). Edit this file, then run
-- `python -m culex._redis.assembly` to refresh the copies. Not a script of its own.

-- A task whose hash has waited=1 (wait.lua) has producers blocked on its done list: one
-- element there wakes them all, since each waits with BLMOVE from the list to itself,
-- which puts the element back. The list expires with the task's hash (ttl ms).
local function wake(task_key, done_key, ttl)
  if redis.call('HDEL', task_key, 'waited') == 1 then
    redis.call('RPUSH', done_key, 'done')
    redis.call('PEXPIRE', done_key, ttl)
  end
end
