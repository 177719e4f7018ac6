-- Moving a task to dead, written once: fail.lua, reclaim.lua and cancel.lua each carry a
-- copy of this file between `-- >>> include/dead.lua` and `-- <<< include/dead.lua`, after
-- their copy of include/wake.lua, so that every shipped script is complete by itself and
-- works when sent as it is. Edit this file, then run `python -m culex._redis.assembly` to
-- refresh the copies; tests/_redis/test_scripts.py fails while a copy differs from it. Not a
-- script of its own.

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
