-- Freeing a task's dedupe key when the task ends, written once: complete.lua, fail.lua,
-- reclaim.lua, cancel.lua, delete.lua and claim.lua each carry a copy of this file between
-- `-- >>> include/dedupe.lua` and `-- <<< include/dedupe.lua`. Edit this file, then run
-- `python -m culex._redis.assembly` to refresh the copies. Not a script of its own.

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

-- Drop up to 4 windows that ended before `now`, and their keys' entries while the entry's
-- task is not live (a producer of an older version, that knows no windows, may have given
-- the key to a new task). Every enqueue with a dedupe key calls it, so windows that have
-- ended never pile up beyond those added since the last such enqueue.
local function prune_windows(dedupe_hash, task_prefix, now)
  local windows = dedupe_hash .. ':windows'
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', windows, '-inf', now, 'LIMIT', 0, 4)) do
    redis.call('ZREM', windows, key)
    local holder = redis.call('HGET', dedupe_hash, key)
    local state = holder and redis.pcall('HGET', task_prefix .. holder, 'state')
    if holder and state ~= 'waiting' and state ~= 'scheduled' and state ~= 'pending' then
      redis.call('HDEL', dedupe_hash, key)
    end
  end
end
