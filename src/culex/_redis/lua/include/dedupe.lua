-- Freeing a task's dedupe key when the task ends, written once: complete.lua, fail.lua,
-- reclaim.lua, cancel.lua, delete.lua and claim.lua each carry a copy of this file between
-- `-- >>> include/dedupe.lua` and `-- <<< include/dedupe.lua`. Edit this file, then run
-- `python -m culex._redis.assembly` to refresh the copies. Not a script of its own.

-- The dedupe hash maps a key to the live task enqueued with it (enqueue.lua). A task that
-- ends frees its key, only while the key still names it: a later task may have taken it.
-- dedupe_hash nil (a caller that sends fewer keys, e.g. a runner of an older version) or a
-- task without a key costs nothing; enqueue.lua treats a key whose task has ended as free,
-- so a key left behind heals itself. pcall: a dedupe key of another type must not stop
-- the task's own change.
local function free_dedupe(dedupe_hash, key, id)
  if dedupe_hash and key and redis.pcall('HGET', dedupe_hash, key) == id then
    redis.pcall('HDEL', dedupe_hash, key)
  end
end
